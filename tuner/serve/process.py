"""Start, watch and stop one server process (a real `vllm serve` or the simulator) for one trial.

Why this is more than Popen + terminate() (docs/real-vllm-cpu.md sections 5 and 10):
* a real vLLM is a tree (API server -> EngineCore -> Worker, + resource_tracker): killing only the
  parent orphans ~1.5 GB for good, so each server leads its own process group and every signal
  goes to the whole group, plus any descendant that left the group with setsid;
* with open streams the API server ignores SIGINT until its clients leave (300 s), so stop()
  escalates SIGINT -> SIGTERM -> SIGKILL with deadlines;
* a killed tuner cannot stop its groups: a watchdog process per server (tuner/serve/watchdog.py) stops
  the group within seconds once the tuner is gone; each group is also recorded in a small JSON
  file, and cleanup_stale_groups() stops what is left later without signalling a recycled pid;
* upstream vLLM binds its port with SO_REUSEPORT (long before it listens), so a second vLLM on a
  taken port does NOT fail with "Address already in use": both serve and the kernel splits the
  requests. So start(port=) refuses a held port and readiness checks who else listens.
Linux only (/proc); no psutil on purpose. Known gap: a descendant that calls setsid and whose
parent dies between two looks (every track_interval_s) is missed; PR_SET_CHILD_SUBREAPER or
cgroups would close it.
"""
from __future__ import annotations

import atexit
import enum
import http.client
import json
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from ..vocabulary.errors import Stopped
from ..vocabulary.errors.hangup import detach_dead_outputs
from .ports import PROBE_LOCK, _foreign_listeners, port_in_use
from .procgroup import (
    _DEAD,
    _boot_id,
    _escalate,
    _exec_cmdline,
    _Group,
    _stat,
)
from .redact import redact_argv, scrub, secret_values

log = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------ devices
_GAUDI_GROUPS = {"0,1", "2,3", "4,5", "6,7", "0,1,2,3", "4,5,6,7", "0,1,2,3,4,5,6,7"}


def device_env(devices: list[str] | None, kind: str = "hpu") -> dict[str, str]:
    """Env that pins one trial's server to some cards, so several trials can share one node.

    Gaudi: HABANA_VISIBLE_MODULES takes *module ids* 0-7 (stable across reboots; `hl-smi -Q
    index,module_id -f csv` maps them) and is read per process, so one container that sees all 8
    cards can run e.g. four 2-card trials on "0,1", "2,3", "4,5", "6,7". HABANA_VISIBLE_DEVICES is
    not a substitute: the habana container runtime reads it at `docker run` (device indices, which
    may change after a reboot). Habana recommends the groups in _GAUDI_GROUPS for 2 and 4 cards;
    other groups get a warning. --tensor-parallel-size must equal len(devices): the caller's job.
    kind="cuda" sets CUDA_VISIBLE_DEVICES; kind "cpu"/"sim" or no devices pins nothing.
    """
    if not devices or kind in ("cpu", "sim"):
        return {}
    ids = [str(d).strip() for d in devices]
    if kind == "cuda":
        return {"CUDA_VISIBLE_DEVICES": ",".join(ids)}
    if kind != "hpu":
        raise ValueError(f"unknown device kind {kind!r} (hpu, cuda, cpu, sim)")
    if any(not i.isdigit() or int(i) > 7 for i in ids) or len(set(ids)) != len(ids):
        raise ValueError(f"Gaudi module ids must be distinct integers 0-7, got {devices!r}")
    if len(ids) > 1 and ",".join(sorted(ids)) not in _GAUDI_GROUPS:
        log.warning("HABANA_VISIBLE_MODULES=%s is not a recommended card group", ",".join(ids))
    return {"HABANA_VISIBLE_MODULES": ",".join(ids)}


_LINE_END = re.compile(rb"\r\n|\n|\r")
_BAR_REDRAWN = re.compile(rb"\d+/\d+ \[[^\[\]]*\]\s*$")  # tqdm's "n/total [elapsed<left, rate]" at the end
_PORT_IN_USE = re.compile(r"address already in use|\[Errno 98\]|EADDRINUSE", re.IGNORECASE)

# ------------------------------------------------------------------------------------ /proc
class OutcomeKind(str, enum.Enum):
    READY = "ready"
    BOOT_FAILURE = "boot_failure"              # exited (or could not start) before being ready
    PORT_IN_USE = "port_in_use"                # in the log, or someone else listens on the port
    WARMUP_OOM = "warmup_oom"                  # the caller's log watcher saw an out-of-memory
    WARMUP_TIMEOUT = "warmup_timeout"
    BOOT_TIMEOUT = "boot_timeout"
    WARMUP_OVER_BUDGET = "warmup_over_budget"  # should_abort() gave a reason
    CRASH = "crash"                            # exited after it had been ready


@dataclass
class Outcome:
    kind: OutcomeKind
    reason: str
    exit_code: int | None = None
    elapsed_s: float = 0.0                 # since start()
    warmup_started_s: float | None = None  # since start(): when warmup_started() first said so
    log_tail: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.kind is OutcomeKind.READY


@dataclass
class StopReport:
    ended_by: str | None   # the signal after which nothing was left; None: nothing to signal
    elapsed_s: float
    exit_code: int | None  # of the direct child (negative: killed by that signal)
    alive_before: dict[str, list[int]] = field(default_factory=dict)  # pids alive at each signal
    leftover: list[int] = field(default_factory=list)  # alive even after SIGKILL's grace
    first_signal_s: float | None = None  # when the first signal went out, from the start of stop()

    @property
    def clean(self) -> bool:
        return not self.leftover


# ------------------------------------------------------------------------------------ the process
_LIVE: set[ServerProcess] = set()  # started and not stopped yet: the atexit hook stops these
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # ignore http_proxy


def _health_ok(url: str, timeout: float) -> bool:
    try:
        with _NO_PROXY.open(url, timeout=timeout) as resp:
            return resp.status == 200
    except (OSError, http.client.HTTPException, ValueError):
        return False


class ServerProcess:
    """One server for one trial:

        with ServerProcess(records_dir=run_dir, on_line=watcher.feed) as srv:
            srv.start(argv, env, trial_dir / "server.log", port=port)
            outcome = srv.wait_ready(url, boot_timeout_s=600, warmup_timeout_s=3600, ...)
            ...                  # during the load test, srv.check() turns a dead server into CRASH
        # leaving the block stops the whole tree; srv.stop_report says how

    on_line(line, t_monotonic) is called for each log line in order, one call at a time (mostly
    on the watcher thread); keep it quick and never call stop() from it. `env` is used as given:
    pass the complete environment. The argv must run the server as our descendant (not through
    `docker run`, whose container would outlive any signal to the client).
    """

    def __init__(self, *, records_dir: Path | str | None = None,
                 on_line: Callable[[str, float], None] | None = None, tail_lines: int = 200,
                 track_interval_s: float = 0.5, watchdog: bool = True):
        self.watchdog = watchdog  # stop the group if this process dies (tuner/serve/watchdog.py)
        self._guard = None
        self.records_dir = Path(records_dir) if records_dir is not None else None
        self.on_line, self.track_interval_s = on_line, track_interval_s
        self.proc: subprocess.Popen | None = None
        self.group: _Group | None = None
        self.started_at = self.ready_at = self.warmup_started_at = None
        self.port_in_use_line: str | None = None
        self.stop_report: StopReport | None = None
        self._early: tuple[OutcomeKind, str] | None = None  # ended before any process existed
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._log, self._buf, self._callback_failed = None, b"", False
        self._log_path: Path | None = None
        self._secrets: list[str] = []  # values the server was given that must not outlive it in its log
        self._record: Path | None = None
        self._record_data: dict = {}
        self._lock = threading.RLock()       # log reading and on_line delivery
        self._group_lock = threading.Lock()  # group.escaped: watcher thread vs stop()
        self._stop_lock = threading.Lock()
        self._hurry = threading.Event()  # hurry(): no more grace, SIGKILL
        self._done = threading.Event()
        self._stopping = False  # from then on only stop() touches the group and the record

    def start(self, argv: list[str], env: dict[str, str], log_path: Path | str, *,
              cwd: Path | str | None = None, port: int | None = None) -> ServerProcess:
        """Launch argv (never through a shell) as leader of a new session, output to log_path.
        With `port`, a port that is already held ends the attempt as PORT_IN_USE before launch:
        vLLM would bind it anyway (SO_REUSEPORT) and share it, e.g. with an orphan."""
        if self.proc is not None or self._early is not None:
            raise RuntimeError("a ServerProcess starts once")
        argv = [str(a) for a in argv]
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting server: %s (log: %s)", shlex.join(redact_argv(argv)), log_path)
        self._log_path, self._secrets = log_path, secret_values(argv, env)
        self.started_at = time.monotonic()
        with open(log_path, "ab") as out:  # append: a retry keeps the earlier attempt's log
            offset = out.tell()
            if port is not None and port_in_use(port):
                self._early = (OutcomeKind.PORT_IN_USE, f"port {port} was in use before start")
            else:
                try:
                    with PROBE_LOCK:  # no other thread's port probe is bound while the child is forked
                        self.proc = subprocess.Popen(
                            argv, env={str(k): str(v) for k, v in env.items()}, cwd=cwd,
                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
                except OSError as e:  # e.g. vllm not installed: an Outcome, not an exception
                    self._early = (OutcomeKind.BOOT_FAILURE, f"could not start {argv[0]!r}: {e}")
            if self._early:
                out.write(f"bucket-tuner: {self._early[1]}\n".encode())
        self._log = open(log_path, "rb")
        self._log.seek(offset)
        if self.proc is None:
            self._pump(final=True)
            return self
        leader = _stat(self.proc.pid)  # cannot be gone: we have not reaped it
        self.group = _Group(self.proc.pid, leader.start if leader else 0)
        _LIVE.add(self)
        self._write_record(argv[0], redact_argv(_exec_cmdline(self.proc.pid)), log_path)
        if self.watchdog:
            self._start_guard(log_path)
        threading.Thread(target=self._watch, name=f"server-{self.proc.pid}", daemon=True).start()
        return self

    def _start_guard(self, log_path: Path) -> None:
        from .watchdog import Guard

        try:
            self._guard = Guard(self.group.pgid, self.group.leader_start, self._record, log_path)
        except OSError as e:  # the server still runs; only a later cleanup_stale_groups() covers it
            log.warning("could not start the watchdog of server group %d: %s", self.group.pgid, e)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def pgid(self) -> int | None:
        return self.group.pgid if self.group else None

    def alive_pids(self) -> list[int]:
        """Every live process of this server: its group and the descendants that left it."""
        return self.group.alive() if self.group else []

    def log_tail(self) -> list[str]:
        with self._lock:
            return list(self._tail)

    def _write_record(self, argv0=None, cmdline=None, log_path=None) -> None:
        """(Re)write this group's record: enough for a later run to find and verify it."""
        if self.records_dir is None:
            return
        if self._record is None:
            self.records_dir.mkdir(parents=True, exist_ok=True)
            host, me = socket.gethostname(), _stat(os.getpid())
            self._record = self.records_dir / f"server-{host}-{self.group.pgid}.json"
            self._record_data = dict(
                pgid=self.group.pgid, pid=self.proc.pid, argv0=argv0, cmdline=cmdline,
                leader_start=self.group.leader_start, log_path=str(log_path),
                started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), host=host, boot_id=_boot_id(),
                owner_pid=os.getpid(), owner_start=me.start if me else 0)
        self._record_data["escaped"] = {str(p): s for p, s in self.group.escaped.items()}
        tmp = self._record.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(self._record_data, indent=1))
            os.replace(tmp, self._record)  # atomic: a reader never sees half a record
        except OSError:
            tmp.unlink(missing_ok=True)  # a full disk: no half-written record left behind
            raise

    # -- following the log ------------------------------------------------------------------------
    def _watch(self) -> None:
        next_track = 0.0
        while not self._done.wait(0.05):
            self._pump()
            if (time.monotonic() >= next_track and not self._stopping
                    and self._group_lock.acquire(blocking=False)):
                try:
                    if self.group.track():
                        self._write_record()
                except OSError as e:  # e.g. the run folder vanished: keep following the log
                    log.warning("could not update the server record: %s", e)
                finally:
                    self._group_lock.release()
                next_track = time.monotonic() + self.track_interval_s

    def _pump(self, final: bool = False) -> None:
        with self._lock:
            if self._log is None:
                return
            while chunk := self._log.read(65536):
                self._buf += chunk
            # A tqdm bar redraws itself with "\r" and ends its line only when it closes: each redraw is a
            # line of its own, so the watcher sees warm-up progress while the bar is still open.
            data, held = self._buf, b""
            if data.endswith(b"\r") and not final:  # maybe a "\r\n" cut between two reads: wait for the next
                data, held = data[:-1], b"\r"
            *lines, rest = _LINE_END.split(data)
            if not held and _BAR_REDRAWN.search(rest):  # the newest redraw is whole: it need not wait for the next
                lines.append(rest)
                rest = b""
            self._buf = rest + held
            if final and self._buf:  # the server is gone: a last line without "\n" counts too
                lines.append(self._buf)
                self._buf = b""
            now = time.monotonic()
            for raw in lines:
                line = raw.rstrip(b"\r").decode("utf-8", errors="replace")
                if self._secrets:
                    line = scrub(line, self._secrets)
                self._tail.append(line)
                if self.port_in_use_line is None and _PORT_IN_USE.search(line):
                    self.port_in_use_line = line
                if self.on_line is not None:
                    try:
                        self.on_line(line, now)
                    except Exception:  # a parser bug must not stop log following
                        if not self._callback_failed:
                            log.exception("on_line callback failed (further errors not logged)")
                        self._callback_failed = True

    # -- readiness --------------------------------------------------------------------------------
    def _outcome(self, kind: OutcomeKind, reason: str, exit_code: int | None = None) -> Outcome:
        self._pump()  # the tail handed out includes everything logged so far
        t0 = self.started_at or time.monotonic()
        ws = None if self.warmup_started_at is None else self.warmup_started_at - t0
        return Outcome(kind, reason, exit_code, time.monotonic() - t0, ws, self.log_tail())

    def check(self, oom_seen: Callable[[], bool] | None = None) -> Outcome | None:
        """None while the server runs; else how it ended (CRASH once it had been ready)."""
        if self._early is not None:
            return self._outcome(*self._early)
        if self.proc is None:
            raise RuntimeError("start() first")
        if (rc := self.proc.poll()) is None:
            return None
        self._pump(final=True)  # classify on the whole log; the watcher sees every line first
        if self.ready_at is not None:
            return self._outcome(OutcomeKind.CRASH, f"exited with code {rc} after being ready", rc)
        if self.port_in_use_line is not None:
            return self._outcome(OutcomeKind.PORT_IN_USE,
                                 f"port already in use: {self.port_in_use_line.strip()}", rc)
        if oom_seen is not None and oom_seen():
            return self._outcome(OutcomeKind.WARMUP_OOM,
                                 f"out of memory during warmup, exited with code {rc}", rc)
        phase = "before warmup" if self.warmup_started_at is None else "during warmup"
        return self._outcome(OutcomeKind.BOOT_FAILURE, f"exited with code {rc} {phase}", rc)

    def wait_ready(self, base_url: str, *, boot_timeout_s: float, warmup_timeout_s: float,
                   warmup_started: Callable[[], bool] | None = None,
                   should_abort: Callable[[], str | None] | None = None,
                   oom_seen: Callable[[], bool] | None = None,
                   poll_interval_s: float = 0.2, check_listener: bool = True) -> Outcome:
        """Poll GET {base_url}/health until 200, watching for every other way start-up can end.

        The boot limit counts from start() until warmup_started() first returns True; from then
        on the warmup limit counts from that moment. Without a warmup_started callback the whole
        start-up gets boot + warmup limits and a miss is a BOOT_TIMEOUT.
        A 200 counts only if no process outside our tree also listens on the port (with
        SO_REUSEPORT it may be an orphan's answer); check_listener=False skips that, for a
        server whose listening socket is legitimately not ours (e.g. behind docker-proxy)."""
        url = base_url.rstrip("/") + "/health"
        port = urllib.parse.urlsplit(base_url).port
        while True:
            now = time.monotonic()
            if self.warmup_started_at is None and warmup_started is not None and warmup_started():
                self.warmup_started_at = now
            if (ended := self.check(oom_seen)) is not None:
                return ended
            if self.port_in_use_line is not None:  # some servers log it and then hang on
                return self._outcome(OutcomeKind.PORT_IN_USE,
                                     f"port already in use: {self.port_in_use_line.strip()}")
            if oom_seen is not None and oom_seen():
                return self._outcome(OutcomeKind.WARMUP_OOM, "out of memory during warmup")
            if should_abort is not None and (why := should_abort()):
                return self._outcome(OutcomeKind.WARMUP_OVER_BUDGET, why)
            if self.warmup_started_at is not None:
                kind, limit_s = OutcomeKind.WARMUP_TIMEOUT, warmup_timeout_s
                deadline = self.warmup_started_at + limit_s
            else:
                kind = OutcomeKind.BOOT_TIMEOUT
                limit_s = boot_timeout_s + (warmup_timeout_s if warmup_started is None else 0.0)
                deadline = self.started_at + limit_s
            # a short timeout: a socket that accepts but never answers must not hide an exit
            if _health_ok(url, timeout=min(1.0, max(0.1, deadline - now))):
                if check_listener and port and (foreign := _foreign_listeners(port, self.alive_pids)):
                    return self._outcome(OutcomeKind.PORT_IN_USE,  # that 200 may not be ours
                                         f"{foreign} socket(s) of other processes also listen "
                                         f"on port {port} (SO_REUSEPORT)")
                self.ready_at = time.monotonic()
                return self._outcome(OutcomeKind.READY, "GET /health returned 200")
            if time.monotonic() >= deadline:
                return self._outcome(kind, f"no /health 200 within {limit_s:g} s ({kind.value})")
            time.sleep(max(0.0, min(poll_interval_s - (time.monotonic() - now),
                                    deadline - time.monotonic())))

    # -- stopping ---------------------------------------------------------------------------------
    def stop(self, grace_int_s: float = 10.0, grace_term_s: float = 10.0,
             grace_kill_s: float = 5.0) -> StopReport:
        """SIGINT, then SIGTERM, then SIGKILL to the whole group and its escaped descendants, each
        followed by its grace period, until no process is left. Idempotent."""
        with self._stop_lock:
            if self.stop_report is not None:
                return self.stop_report
            t0 = time.monotonic()
            if self.proc is None:
                self._close_log()
                self.stop_report = StopReport(None, 0.0, None)
                return self.stop_report
            steps = [(signal.SIGINT, grace_int_s), (signal.SIGTERM, grace_term_s),
                     (signal.SIGKILL, grace_kill_s)]
            self._stopping = True
            if self._guard is not None:  # we stop the group ourselves, in order
                self._guard.release()
            first: list[float] = []
            with self._group_lock:
                ended_by, before, leftover = _escalate(self.group, steps, reap=self.proc.poll, hurry=self._hurry,
                                                       on_signal=lambda: first or first.append(time.monotonic() - t0))
            if not leftover:
                with suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=1.0)
            if self._guard is not None:
                self._guard.reap()
            report = StopReport(ended_by, time.monotonic() - t0, self.proc.returncode,
                                before, leftover, round(first[0], 3) if first else None)
            self._close_log()
            if leftover:  # keep the record: a later cleanup_stale_groups() tries again
                log.error("server group %d: pids %s survived SIGKILL", self.pgid, leftover)
            elif self._record is not None:
                self._record.unlink(missing_ok=True)
            self.group.reap_orphans()  # as a container's PID 1, the tree's orphans are ours to reap
            _LIVE.discard(self)
            log.info("server group %d stopped (%s) in %.2f s", self.pgid, ended_by or "had exited",
                     report.elapsed_s)
            self.stop_report = report
            return report

    def hurry(self) -> None:
        """SIGKILL the whole group now, and make a stop() in progress (or to come) skip its grace
        periods: the tuner got a second signal and must be gone within the scheduler's grace."""
        self._hurry.set()
        if self.group is None or self._stopping:
            return  # stop() is escalating: it sees the event within 50 ms
        if self._group_lock.acquire(timeout=1.0):  # the watcher's sweep holds it briefly
            try:
                self.group.signal(signal.SIGKILL)
            finally:
                self._group_lock.release()

    def _close_log(self) -> None:
        self._done.set()
        self._pump(final=True)  # deliver the shutdown lines too
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None
                self._scrub_log()

    def _scrub_log(self) -> None:
        """The server printed what it was given (vLLM logs its arguments, --api-key among them): the
        kept log holds the redaction mark instead. Rewritten once the server is gone."""
        if not self._secrets or self._log_path is None:
            return
        try:
            text = self._log_path.read_bytes().decode("utf-8", errors="surrogateescape")
            clean = scrub(text, self._secrets)
            if clean != text:
                tmp = self._log_path.with_name(self._log_path.name + ".scrub")
                tmp.write_bytes(clean.encode("utf-8", errors="surrogateescape"))
                os.replace(tmp, self._log_path)
        except OSError as e:  # a full disk: say so, the log keeps what the server wrote
            log.error("could not scrub the secrets from %s: %s", self._log_path, e)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ------------------------------------------------------------------------------------ safety nets
@atexit.register
def _stop_all_at_exit() -> None:
    # Runs on normal exit, after an uncaught exception or Ctrl-C, and after the SystemExit raised
    # by install_signal_handlers(); not after SIGKILL (cleanup_stale_groups covers that).
    for srv in list(_LIVE):
        try:
            srv.stop(grace_int_s=5.0, grace_term_s=5.0, grace_kill_s=2.0)
        except BaseException:  # keep stopping the others
            log.exception("stopping a server at exit failed")


def hurry_all() -> list[int]:
    """hurry() every live server (a second signal to the tuner); returns their pgids."""
    live = list(_LIVE)
    for srv in live:
        srv.hurry()
    return [srv.pgid for srv in live if srv.pgid is not None]


def install_signal_handlers(signals=(signal.SIGTERM, signal.SIGHUP)) -> None:
    """Make SIGTERM/SIGHUP to the tuner unwind like Ctrl-C (tuner.errors.Stopped, a SystemExit with
    status 128 + signal, instead of dying on the spot), so `with` blocks and the atexit hook stop the
    servers. As PID 1 of a container this is what makes SIGTERM heard at all: the kernel drops the
    signals PID 1 has no handler for. The handler only raises; no work runs in signal context. Call
    from the main thread. Servers live in their own sessions, so a terminal's Ctrl-C reaches only
    the tuner, which then stops them in order."""
    def _raise(signum, _frame):
        if signum == signal.SIGHUP:  # a closed terminal: writing to it would fail the way out
            detach_dead_outputs()
        raise Stopped(signum)
    for sig in signals:
        signal.signal(sig, _raise)


def cleanup_stale_groups(records_dir: Path | str, *, grace_term_s: float = 10.0,
                         grace_kill_s: float = 5.0) -> list[int]:
    """Stop server groups left behind by a killed tuner; returns their pgids.

    A record is acted on only if it was written on this host in this boot and its owner tuner is
    gone. Its group must still be ours: a leader pid that still exists must have the recorded
    start time and command line, else the pid was recycled and is left alone. If the leader has
    died, members left in its group are still ours: the kernel never reuses a pid that is still
    some process's group id. Records of groups that are gone are removed."""
    stopped = []
    for path in sorted(Path(records_dir).glob("server-*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            log.warning("unreadable server record %s left alone", path)
            continue
        if rec.get("host") != socket.gethostname():
            continue  # another node sharing the study folder: its pids mean nothing here
        if rec.get("boot_id") != _boot_id():
            path.unlink(missing_ok=True)  # rebooted since: those processes are gone
            continue
        owner = _stat(int(rec.get("owner_pid", 0)))
        if owner and owner.start == rec.get("owner_start") and owner.state not in _DEAD:
            mine = int(rec["owner_pid"]) == os.getpid()
            if not mine or any(s.pgid == rec["pgid"] for s in list(_LIVE)):
                continue  # a live tuner (or a running slot of this one) still owns it
        group = _Group(int(rec["pgid"]), int(rec["leader_start"]),
                       {int(p): int(s) for p, s in rec.get("escaped", {}).items()},
                       leader_cmdline=rec.get("cmdline") or None)  # start time suffices
        if group.alive():
            log.warning("stopping stale server group %d (%s, log %s)", group.pgid,
                        rec.get("argv0"), rec.get("log_path"))
            _, _, leftover = _escalate(group, [(signal.SIGTERM, grace_term_s),
                                               (signal.SIGKILL, grace_kill_s)])
            stopped.append(group.pgid)
            if leftover:
                log.error("stale group %d: pids %s survived SIGKILL", group.pgid, leftover)
                continue
        path.unlink(missing_ok=True)
    return stopped
