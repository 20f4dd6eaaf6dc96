"""A server's process group as /proc shows it, and stopping it with escalation.

Shared by the launcher (tuner/serve/process.py) and the watchdog process beside each server
(tuner/serve/watchdog.py), which must stop the same group the same way when the tuner dies. Linux only:
everything is read from /proc (no psutil).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from .redact import redact_argv

_DEAD = "ZX"  # zombie / dead: no memory, no port, nothing left to stop


@dataclass(frozen=True)
class _Proc:
    ppid: int
    pgid: int
    state: str
    start: int  # clock ticks after boot: (pid, start) identifies a process, a pid alone does not


def _read(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def _stat(pid: int) -> _Proc | None:
    if (raw := _read(f"/proc/{pid}/stat")) is None:
        return None
    f = raw.decode(errors="replace").rpartition(")")[2].split()  # comm may hold spaces and ')'
    return _Proc(ppid=int(f[1]), pgid=int(f[2]), state=f[0], start=int(f[19]))


def _scan() -> dict[int, _Proc]:
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (p := _stat(int(name))) is not None:
            procs[int(name)] = p
    return procs


def _cmdline(pid: int) -> list[str]:
    raw = _read(f"/proc/{pid}/cmdline") or b""
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def _exec_cmdline(pid: int) -> list[str]:
    # Popen returns once exec has begun, but the kernel fills in the new command line a moment
    # later: wait for it (briefly), or the record could never be matched again.
    for _ in range(200):
        if (cmd := _cmdline(pid)) or (s := _stat(pid)) is None or s.state in _DEAD:
            return cmd
        time.sleep(0.005)
    return []


def _boot_id() -> str:
    return (_read("/proc/sys/kernel/random/boot_id") or b"").decode().strip()


def process_identity(pid: int | None = None) -> dict:
    """Who a process is, durably: host, boot, pid and start time (a pid alone gets recycled)."""
    pid = os.getpid() if pid is None else pid
    st = _stat(pid)
    return {"host": socket.gethostname(), "boot_id": _boot_id(), "pid": pid, "start": st.start if st else 0}


def identity_alive(ident: dict) -> bool | None:
    """True/False for a process of this host and boot; None when it lives elsewhere (cannot tell)."""
    if ident.get("host") != socket.gethostname():
        return None
    if ident.get("boot_id") != _boot_id():
        return False  # rebooted since: it is gone
    st = _stat(int(ident.get("pid", 0)))
    return bool(st and st.start == ident.get("start") and st.state not in _DEAD)


class _Group:
    """A server's process group, plus descendants that left it (setsid/setpgid) on their own."""

    def __init__(self, pgid: int, leader_start: int, escaped: dict[int, int] | None = None,
                 leader_cmdline: list[str] | None = None):
        self.pgid, self.leader_start, self.leader_cmdline = pgid, leader_start, leader_cmdline
        self.escaped: dict[int, int] = dict(escaped or {})  # pid -> start ticks

    def is_ours(self, snap: dict[int, _Proc]) -> bool:
        # While any process has pgid X, the kernel never hands out X as a new pid. So members of
        # group X are ours unless pid X now belongs to another (younger) process: then our group
        # had emptied out, X was recycled, and the group must not be touched.
        leader = snap.get(self.pgid)
        if leader is None:
            return True
        if leader.start != self.leader_start:
            return False
        if self.leader_cmdline is not None and leader.state not in _DEAD:
            return redact_argv(_cmdline(self.pgid)) == self.leader_cmdline
        return True

    def alive(self, snap: dict[int, _Proc] | None = None) -> list[int]:
        snap = _scan() if snap is None else snap
        pids = set()
        if self.is_ours(snap):
            pids = {p for p, s in snap.items() if s.pgid == self.pgid and s.state not in _DEAD
                    and s.start >= self.leader_start}
        pids |= {p for p, start in self.escaped.items()
                 if (s := snap.get(p)) and s.start == start and s.state not in _DEAD}
        return sorted(pids)

    def track(self, snap: dict[int, _Proc] | None = None) -> bool:
        """Remember descendants outside the group (ppid walk); True if new ones were found."""
        snap = _scan() if snap is None else snap
        children: dict[int, list[int]] = {}
        for pid, s in snap.items():
            children.setdefault(s.ppid, []).append(pid)
        todo = self.alive(snap)
        seen, new = set(todo), False
        while todo:
            for child in children.get(todo.pop(), ()):
                if child in seen:
                    continue
                seen.add(child)
                todo.append(child)
                s = snap[child]
                if s.pgid != self.pgid and s.state not in _DEAD and child not in self.escaped:
                    self.escaped[child] = s.start
                    new = True
        return new

    def reap_orphans(self) -> list[int]:
        """Reap the group's dead processes that were handed to us when their parent died: that happens
        to PID 1 of a PID namespace (the tuner as a container's command), and nobody else would reap
        them, so each stopped vLLM tree would leave <defunct> EngineCore and worker entries. Never the
        leader: it is our own child, which subprocess reaps."""
        me, reaped = os.getpid(), []
        for pid, s in _scan().items():
            if (s.ppid == me and s.state == "Z" and pid != self.pgid
                    and (s.pgid == self.pgid or self.escaped.get(pid) == s.start)):
                with suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                    reaped.append(pid)
        return reaped

    def signal(self, sig: int, snap: dict[int, _Proc] | None = None) -> None:
        snap = _scan() if snap is None else snap
        if self.is_ours(snap):
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, sig)
        for pid, start in self.escaped.items():
            if (s := snap.get(pid)) and s.start == start:  # never a recycled pid
                with suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)


def _escalate(group: _Group, steps, reap: Callable[[], object] = lambda: None, hurry=None,
              on_signal: Callable[[], object] = lambda: None):
    """Send each (signal, grace) step to the whole group until nothing is left. Returns
    (ended_by or None, {signal name: pids alive when it was sent}, pids still alive at the end).
    `hurry` (a threading.Event): once set, the steps before SIGKILL and their grace are skipped.
    `on_signal` is called as each signal goes out."""
    before: dict[str, list[int]] = {}
    alive: list[int] = []

    def hurried(sig) -> bool:
        return hurry is not None and hurry.is_set() and sig != signal.SIGKILL

    for sig, grace in steps:
        if hurried(sig):
            continue
        reap()  # reap our direct child, or it lingers as a zombie
        # One look at /proc serves the step: a full scan costs a GIL hand-back per file, and a tuner
        # stopping while its own load client streams waited seconds per scan before its first signal.
        snap = _scan()
        group.track(snap)  # last sweep for children that escaped since the previous look
        if not (alive := group.alive(snap)):
            break
        before[sig.name] = alive
        group.signal(sig, snap)
        on_signal()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            time.sleep(0.05)
            reap()
            if not group.alive():
                return sig.name, before, []
            if hurried(sig):
                break
        alive = group.alive()
    return None, before, alive


# ------------------------------------------------------------------------------------ results
