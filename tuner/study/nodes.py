"""Many tuners, one study: what lets several nodes share an Optuna study on PostgreSQL.

Optuna's RDB storage is the distributed engine; this module adds what ask/tell on several hosts
needs around it:
* `storage_url` / `engine_kwargs`: a plain ``postgresql://`` URL runs on psycopg 3 when psycopg2 is
  absent; connections are checked before use (a restarted server leaves dead ones in the pool) and a
  connection attempt gives up after CONNECT_TIMEOUT_S instead of hanging on an unreachable host.
  Passwords come from libpq (PGPASSWORD, ~/.pgpass or PGPASSFILE), never from the command line.
* `ResilientStorage`: every storage call is retried with backoff while the database is unreachable
  (a PostgreSQL restart, a network blip), for up to a window; after that a clear error.
* `AskLock`: counting the study's trials and asking for a new one is atomic across nodes (a
  PostgreSQL advisory lock; a file lock for SQLite), so --n-trials is met exactly, never overshot.
* `Heartbeat` and `StaleReaper`: each running trial beats every interval; every node fails a trial
  whose beat is older than the grace period as `tuner_died` and enqueues its parameters again, so a
  node that dies for good loses nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from ..vocabulary.errors import StorageUnavailable
from ..vocabulary.record import TrialRecord
from .optuna_private import BaseHeartbeat, heartbeat_storage, stale_trial_ids, trial_id
from .storage import driver_url, redact_url

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 120  # a RUNNING trial without a heartbeat this long belongs to a dead tuner
DEFAULT_OUTAGE_S = 600.0  # how long storage calls are retried while the database is unreachable
CONNECT_TIMEOUT_S = 10
TUNER_DIED = "tuner_died"


# ------------------------------------------------------------------------------------ URLs
BASELINE_ATTR = "baseline_settings"  # the baseline trial's exact server options and environment (study/seeding.py)


def requeue_attrs(trial) -> dict:
    """What a trial run again keeps of the original: the baseline's exact settings."""
    return {k: trial.user_attrs[k] for k in (BASELINE_ATTR,) if k in trial.user_attrs}


def is_postgres(url: str) -> bool:
    return url.split(":", 1)[0].split("+", 1)[0] in ("postgresql", "postgres")


storage_url = driver_url  # kept under its old name for callers outside tuner/study/storage.py


def engine_kwargs(url: str) -> dict[str, Any]:
    if is_postgres(url):
        # pre_ping: a restarted server leaves dead connections in the pool; test each before use.
        return {"pool_pre_ping": True,
                "connect_args": {"connect_timeout": CONNECT_TIMEOUT_S, "application_name": "bucket-tuner"}}
    return {}


def heartbeat_interval(grace_s: float) -> int:
    """Beat often enough that a live trial is never mistaken for a dead one (4 beats per grace)."""
    return max(1, min(30, int(grace_s) // 4))


def describe_error(exc: BaseException) -> str:
    """The driver's own first line (e.g. 'connection refused'), without SQLAlchemy's SQL and links."""
    inner = getattr(exc, "orig", None) or exc.__cause__ or exc
    inner = getattr(inner, "orig", None) or inner
    text = str(inner).strip().splitlines()
    return text[0] if text else type(inner).__name__


# ------------------------------------------------------------------------------------ outages
def is_outage(exc: BaseException) -> bool:
    """True for 'the database cannot be reached right now', not for a wrong request."""
    import sqlalchemy.exc as sa_exc

    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, sa_exc.DBAPIError) and e.connection_invalidated:
            return True
        if isinstance(e, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError)):
            return True
        if type(e).__name__ in ("OperationalError", "InterfaceError") and "psycopg" in type(e).__module__:
            return True
    return False


_LAST_OUTAGE = {"end": -float("inf")}  # monotonic time the storage last came back after an outage


def seconds_since_outage() -> float:
    return time.monotonic() - _LAST_OUTAGE["end"]


def retry_outage(fn: Callable[[], Any], what: str, window_s: float, url: str,
                 sleep: Callable[[float], Any] = time.sleep) -> Any:
    """Call fn; while the database is unreachable, retry with backoff (0.5 s doubling to 15 s)."""
    deadline = time.monotonic() + window_s
    delay, warned = 0.5, False
    while True:
        try:
            result = fn()
        except Exception as exc:
            if not is_outage(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise StorageUnavailable(
                    f"the study storage {redact_url(url)} stayed unreachable for {window_s:g} s "
                    f"({what}: {describe_error(exc)}); everything recorded so far is kept, re-run to resume"
                ) from None
            if not warned:
                log.warning("storage %s unreachable (%s); retrying for up to %g s", redact_url(url),
                            describe_error(exc), window_s)
                warned = True
            sleep(delay)
            delay = min(delay * 2, 15.0)
            continue
        if warned:
            _LAST_OUTAGE["end"] = time.monotonic()
            log.warning("storage %s reachable again", redact_url(url))
        return result


class _ResilientBase(BaseStorage, BaseHeartbeat):
    def __init__(self, inner: optuna.storages.RDBStorage, url: str, window_s: float = DEFAULT_OUTAGE_S):
        self.inner, self.url, self.window_s = inner, url, window_s

    def _call(self, name: str, *args, **kwargs):
        method = getattr(self.inner, name)
        return retry_outage(lambda: method(*args, **kwargs), name, self.window_s, self.url)


def _delegate(name: str):
    def method(self, *args, **kwargs):
        return self._call(name, *args, **kwargs)
    method.__name__ = name
    return method


# Every storage and heartbeat operation, retried; built with type() so that ABC sees them defined.
_OPERATIONS = sorted({n for base in (BaseStorage, BaseHeartbeat) for n, v in vars(base).items()
                      if callable(v) and not n.startswith("__")})
ResilientStorage = type("ResilientStorage", (_ResilientBase,), {n: _delegate(n) for n in _OPERATIONS})
ResilientStorage.__doc__ = "An RDBStorage whose calls outlast a database restart (see retry_outage)."
ResilientStorage.__module__ = __name__


# ------------------------------------------------------------------------------------ one ask at a time
class AskLock:
    """Held while a node counts the study's trials and asks for one, so that nodes never overshoot
    --n-trials together. PostgreSQL: a session advisory lock (freed by the server if the node dies);
    SQLite: an flock on a file beside the database; other storages: none."""

    def __init__(self, storage: BaseStorage, url: str, study_name: str):
        self.url, self.study_name = url, study_name
        self._key = int.from_bytes(hashlib.sha1(f"bucket-tuner:{study_name}".encode()).digest()[:8],
                                   "big", signed=True)
        inner = getattr(storage, "inner", storage)
        self._engine = getattr(inner, "engine", None) if is_postgres(url) else None
        self._window = getattr(storage, "window_s", DEFAULT_OUTAGE_S)
        self._path = None
        if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
            self._path = Path(url[len("sqlite:///"):]).with_suffix(".ask.lock")
        self._conn = self._file = None

    def __enter__(self) -> AskLock:
        if self._engine is not None:
            import sqlalchemy

            def acquire():
                conn = self._engine.connect()
                try:
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": self._key})
                except BaseException:
                    conn.close()
                    raise
                return conn
            self._conn = retry_outage(acquire, "lock", self._window, self.url)
        elif self._path is not None:
            self._file = open(self._path, "a")
            fcntl.flock(self._file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        if self._conn is not None:
            import sqlalchemy

            with contextlib.suppress(Exception):  # a dead connection has released it already
                self._conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        if self._file is not None:
            self._file.close()  # releases the flock
            self._file = None


# ------------------------------------------------------------------------------------ heartbeats
class Heartbeat:
    """Beats for one trial at once and then every interval, until stop(). Without a beat an ask/tell
    trial of a crashed tuner would stay RUNNING; the first beat is immediate so that a tuner that dies
    in its first seconds is noticed too."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial):
        self._storage = heartbeat_storage(study)
        self._trial_id = trial_id(trial)
        self._stop = threading.Event()
        if self._storage is None:
            return
        self._interval = self._storage.get_heartbeat_interval()
        self._thread = threading.Thread(target=self._beat, daemon=True, name=f"heartbeat-{trial.number}")
        self._thread.start()

    def _beat(self):
        while True:
            try:
                self._storage.record_heartbeat(self._trial_id)
            except Exception as exc:  # a storage hiccup must not kill the trial; the next beat retries
                log.warning("heartbeat of trial id %s failed: %s", self._trial_id, describe_error(exc))
            if self._stop.wait(self._interval):
                return

    def stop(self):
        self._stop.set()


def fail_stale_trials(study: optuna.Study, me: dict | None = None) -> list[int]:
    """Trials whose heartbeat is older than the grace period: marked `tuner_died`, failed, and their
    parameters enqueued again (by whichever node wins the row lock). Returns the numbers failed here."""
    storage = heartbeat_storage(study)
    if storage is None:
        return []
    failed = []
    for stale_id in stale_trial_ids(storage, study):
        trial = storage.get_trial(stale_id)
        owner = TrialRecord.from_frozen(trial).owner
        if me is not None and owner == me:
            continue  # ours, running in one of our slots: alive whatever its heartbeat says
        reason = (f"no heartbeat for more than its grace period: its tuner (host {owner.get('host', '?')}, "
                  f"pid {owner.get('pid', '?')}) died; failed by pid {(me or {}).get('pid', '?')} on "
                  f"{(me or {}).get('host', '?')} and its parameters enqueued again")
        try:
            # Attributes first: a finished trial accepts none. Several nodes may write the same ones.
            storage.set_trial_user_attr(stale_id, "status", TUNER_DIED)
            storage.set_trial_user_attr(stale_id, "reason", reason)
            storage.set_trial_user_attr(stale_id, "requeued", True)
            storage.set_trial_system_attr(stale_id, "tuner_recovered", True)
            won = storage.set_trial_state_values(stale_id, state=TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # told meanwhile by its owner, or failed by another node
        if won:
            study.enqueue_trial(trial.params, user_attrs={"requeued_from": trial.number, **requeue_attrs(trial)})
            failed.append(trial.number)
    return failed


def others_running(study: optuna.Study, me: dict) -> bool:
    """Does another tuner still run a trial of this study (which may yet fail and need re-running)?
    Only our tuners' trials count (they carry an owner and beat from their first moment, so the
    reaper ends them if their tuner dies); a trial someone asked for by hand is not waited for."""
    return any((owner := TrialRecord.from_frozen(t).owner) and owner != me
               for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


class StaleReaper:
    """A thread that calls fail_stale_trials every heartbeat interval while the study runs."""

    def __init__(self, study: optuna.Study, me: dict, on_failed: Callable[[int], None] | None = None):
        self.study, self.me, self.on_failed = study, me, on_failed
        storage = heartbeat_storage(study)
        self.interval = storage.get_heartbeat_interval() if storage else None
        self.grace = getattr(getattr(storage, "inner", storage), "grace_period", None) or 0
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self) -> StaleReaper:
        if self.interval:
            self._thread = threading.Thread(target=self._run, daemon=True, name="stale-reaper")
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.interval):
            if seconds_since_outage() < self.grace:
                continue  # after an outage every heartbeat is old: let the live tuners beat first
            try:
                for number in fail_stale_trials(self.study, self.me):
                    if self.on_failed:
                        self.on_failed(number)
            except Exception as exc:  # an outage: the next round tries again
                log.warning("checking for trials of dead tuners failed: %s", describe_error(exc))

    def __exit__(self, *exc) -> None:
        self._stop.set()
