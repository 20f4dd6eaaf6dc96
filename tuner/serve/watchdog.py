"""A server's guard against its tuner dying: no server outlives its tuner by more than seconds.

A killed tuner (`kill -9`, an OOM kill, a lost node's pod) cannot stop its servers, and on a Gaudi
node such an orphan holds the cards until someone notices. So next to every server the tuner starts
this small process (`python -m tuner.serve.watchdog`) in a session of its own, its stdin the read end of a
pipe whose only write end the tuner holds. The kernel closes that end whatever way the tuner dies:
* it writes "q" then closes: the tuner stopped the server itself; the watchdog leaves quietly;
* end of file without "q": the tuner is gone; the watchdog stops the server's whole process group,
  plus descendants that left it (from the tuner's record of them and a fresh look at /proc), with
  SIGINT -> SIGTERM -> SIGKILL, and removes the record.
A pipe rather than PR_SET_PDEATHSIG: the death signal reaches only the direct child, not vLLM's
EngineCore and worker processes, and it fires when the forking *thread* exits, not the tuner.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

from .ports import PROBE_LOCK

log = logging.getLogger(__name__)

RELEASE = b"q"
STEPS_S = (("SIGINT", 3.0), ("SIGTERM", 5.0), ("SIGKILL", 3.0))  # ~11 s at worst


class Guard:
    """The tuner's side: start the watchdog for one server group; release() before stopping it, reap()
    once it is stopped."""

    def __init__(self, pgid: int, leader_start: int, record: Path | None, log_path: Path | None):
        read_end, self._write_end = os.pipe()  # both close-on-exec: no server inherits the write end
        argv = [sys.executable, "-m", "tuner.serve.watchdog", "--pgid", str(pgid), "--leader-start",
                str(leader_start)]
        if record is not None:
            argv += ["--record", str(record)]
        if log_path is not None:
            argv += ["--log", str(log_path)]
        try:
            # Own session: a terminal's Ctrl-C or a signal to the tuner's group never reaches it.
            with PROBE_LOCK:  # see ports.PROBE_LOCK
                self.proc = subprocess.Popen(argv, stdin=read_end, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL, start_new_session=True,
                                             cwd=Path(__file__).resolve().parent.parent)
        except BaseException:
            os.close(self._write_end)
            raise
        finally:
            os.close(read_end)

    def release(self) -> None:
        """Tell the watchdog the tuner is stopping the server itself. Returns at once: once "q" is in the
        pipe the watchdog leaves whenever it reads it, so the server's signals need not wait for that."""
        if self._write_end is None:
            return
        with suppress(OSError):
            os.write(self._write_end, RELEASE)
        os.close(self._write_end)
        self._write_end = None

    def reap(self, timeout_s: float = 5.0) -> None:
        """Wait for the released watchdog to exit (a slow one is killed): no zombie left behind."""
        self.release()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _wait_for_tuner(fd: int) -> bool:
    """Block until the pipe says something; True when the tuner released us, False when it died."""
    while True:
        try:
            data = os.read(fd, 1)
        except InterruptedError:
            continue
        except OSError:
            return False
        return data == RELEASE


def _stop_group(pgid: int, leader_start: int, record: Path | None, log_path: Path | None) -> list[int]:
    from .procgroup import _escalate, _Group

    rec = {}
    if record is not None:
        with suppress(OSError, ValueError):
            rec = json.loads(record.read_text())
    escaped = {int(p): int(s) for p, s in rec.get("escaped", {}).items()}
    group = _Group(pgid, leader_start, escaped, leader_cmdline=rec.get("cmdline") or None)
    group.track()
    if not group.alive():
        return []
    _note(log_path, f"bucket-tuner watchdog: the tuner is gone; stopping server group {pgid}")
    steps = [(getattr(signal, name), grace) for name, grace in STEPS_S]
    ended_by, _, leftover = _escalate(group, steps)
    _note(log_path, f"bucket-tuner watchdog: server group {pgid} "
                    + (f"stopped ({ended_by})" if not leftover else f"pids {leftover} survived SIGKILL"))
    if not leftover and record is not None:
        record.unlink(missing_ok=True)
    return leftover


def _note(log_path: Path | None, line: str) -> None:
    if log_path is not None:
        with suppress(OSError), open(log_path, "a") as f:  # the server appends too (O_APPEND)
            f.write(f"{time.strftime('%H:%M:%S')} {line}\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tuner.serve.watchdog", description=__doc__.splitlines()[0])
    p.add_argument("--pgid", type=int, required=True)
    p.add_argument("--leader-start", type=int, required=True, help="start time (clock ticks) of the leader")
    p.add_argument("--record", type=Path, help="the tuner's JSON record of the group")
    p.add_argument("--log", type=Path, help="the server log, for one line saying what happened")
    args = p.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    if _wait_for_tuner(0):
        return 0
    return 1 if _stop_group(args.pgid, args.leader_start, args.record, args.log) else 0


if __name__ == "__main__":
    sys.exit(main())
