"""Opening Optuna storages: for writing (`tune`) and strictly read-only (`report`, `export`, `compare`).

Optuna's RDBStorage creates its schema on open, so handing it a wrong path turns any file into a
study database (an empty file grows to ~110 kB of tables). Readers therefore check what they are
given first (the file exists, is a file, starts with the SQLite header; a server storage holds the
Optuna tables) and open SQLite read-only, so that nothing they read can change. Every message names
the storage with its password hidden.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any

import optuna

from ..serve.redact import redact_env
from ..vocabulary.errors import StorageUnavailable, StudyError, TunerError

SQLITE_LOCK_WAIT_S = 60  # how long a write waits for another process's lock on an SQLite study
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file
_OPTUNA_TABLES = ("studies", "trials", "version_info", "alembic_version")
# What to pip-install for a missing DB-API module (SQLAlchemy 2.1 defaults postgresql:// to psycopg 3).
_DRIVERS = {
    "psycopg": "'psycopg[binary]'", "psycopg2": "psycopg2-binary", "pg8000": "pg8000", "asyncpg": "asyncpg",
    "MySQLdb": "mysqlclient", "pymysql": "PyMySQL", "mysql": "mysql-connector-python", "oracledb": "oracledb",
    "pyodbc": "pyodbc",
}


def _split_credentials(url: str) -> tuple[str, str, str] | None:
    """(scheme://user, password, @host...) when the URL has a password. The password runs to the
    last '@' (as users type it, unescaped '/', ':' or '@' included), so it is never shown in part."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return None
    userinfo, _, host = rest.rpartition("@")
    user, colon, password = userinfo.partition(":")
    if not colon or not password or "/" in user:
        return None
    return f"{scheme}://{user}", password, f"@{host}"


def redact_url(url: str) -> str:
    """The URL with its password replaced by ***."""
    parts = _split_credentials(url)
    if parts:
        return f"{parts[0]}:***{parts[2]}"
    return redact_env({"url": url})["url"]


def url_password(url: str) -> str | None:
    """The password in a URL (to scrub it from any text before it is shown), or None."""
    parts = _split_credentials(url)
    return parts[1] if parts else None


def driver_url(url: str) -> str:
    """SQLAlchemy's `postgresql://` means psycopg2; we ship psycopg 3. Rewritten when only 3 is installed.
    Only what SQLAlchemy is given changes: messages keep the URL as the user wrote it."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        has_psycopg2 = importlib.util.find_spec("psycopg2") is not None
        if has_psycopg2 and scheme == "postgresql":
            return url
        return f"postgresql+{'psycopg2' if has_psycopg2 else 'psycopg'}://{rest}"
    return url


def sqlite_path(url: str) -> Path | None:
    """The file of a `sqlite:///PATH` URL (None for other back-ends and in-memory databases)."""
    if not url.startswith("sqlite:///"):
        return None
    raw = url[len("sqlite:///"):].split("?", 1)[0]
    return None if raw in ("", ":memory:") else Path(raw)


# ----------------------------------------------------------------------------------------- writers

def open_storage(url: str, *, heartbeat_interval: int | None = None, grace_period: int | None = None,
                 heartbeat_stale_trial_callback=None,
                 engine_kwargs: dict[str, Any] | None = None) -> optuna.storages.RDBStorage:
    """Open (and create, if new) a storage for writing. Missing folders of an SQLite path are created."""
    engine_kwargs = dict(engine_kwargs or {})
    path = sqlite_path(url)
    if path is not None:
        _make_parent_folders(path, url)
        if path.exists() and path.stat().st_size:  # an empty file is a new database to SQLite
            _check_sqlite_file(path)
            try:  # another program's database: never add our tables to it
                # Another tuner may be creating the schema this moment: only a database that has
                # tables and none of Optuna's is refused.
                _check_optuna_tables(url, _readonly_sqlite(path), path, foreign_only=True)
            except StudyError as exc:
                raise StudyError(f"{exc}; choose another storage path") from None
            except Exception as exc:
                raise _open_failure(url, exc) from None
        # Several tuners on one machine may share the file: wait for its lock instead of failing.
        engine_kwargs["connect_args"] = {"timeout": SQLITE_LOCK_WAIT_S}
    else:
        _check_driver(url)
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(driver_url(url), engine_kwargs=engine_kwargs,
                                              heartbeat_interval=heartbeat_interval, grace_period=grace_period,
                                              heartbeat_stale_trial_callback=heartbeat_stale_trial_callback)
        except Exception as exc:  # sqlalchemy raises many kinds for a bad URL / unreachable server
            # Two workers creating a new storage at once: one loses the CREATE TABLE race; retry.
            racing = ("already exists", "UNIQUE constraint", "IntegrityError", "database is locked")
            if any(r in str(exc) for r in racing) and attempt < 4:
                time.sleep(0.5 * (attempt + 1))
                continue
            raise (write_failure(exc, url) or _open_failure(url, exc)) from None  # a full disk: its own line
    raise AssertionError("unreachable")


def _make_parent_folders(path: Path, url: str) -> None:
    for folder in reversed(path.parents):
        if folder.exists() and not folder.is_dir():
            raise StudyError(f"storage {redact_url(url)}: {folder} is a file, not a folder; "
                             "choose another path")
    if path.is_dir():
        raise StudyError(f"storage {redact_url(url)}: {path} is a folder; name a database file inside it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageUnavailable(f"storage {redact_url(url)}: cannot create folder {path.parent}: "
                                 f"{exc.strerror}") from None


# ----------------------------------------------------------------------------------------- readers

def open_storage_readonly(url: str) -> optuna.storages.RDBStorage:
    """Open an existing Optuna storage without creating or changing anything in it."""
    path = sqlite_path(url)
    if path is not None:
        if not path.exists():
            raise StudyError(f"no study storage at {path} (file not found)")
        _check_sqlite_file(path)
        engine_kwargs = _readonly_sqlite(path)
    else:
        _check_driver(url)
        engine_kwargs: dict[str, Any] = {}
    try:
        _check_optuna_tables(url, engine_kwargs, path)
        return optuna.storages.RDBStorage(driver_url(url), engine_kwargs=engine_kwargs, skip_table_creation=True)
    except (StudyError, StorageUnavailable):
        raise
    except Exception as exc:
        raise _open_failure(url, exc) from None


def _readonly_sqlite(path: Path) -> dict[str, Any]:
    """Engine arguments that open the SQLite file read-only (SQLite refuses every write)."""
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
    # The same lock wait as writers: a report taken while a tune commits waits instead of failing.
    return {"creator": lambda: sqlite3.connect(uri, uri=True, timeout=SQLITE_LOCK_WAIT_S, check_same_thread=False)}


def _check_sqlite_file(path: Path) -> None:
    if path.is_dir():
        raise StudyError(f"{path} is a folder, not an SQLite database file")
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StorageUnavailable(f"cannot read {path}: {exc.strerror}") from None
    if not head:
        raise StudyError(f"{path} is an empty file, not an SQLite database")
    if head != SQLITE_HEADER:
        raise StudyError(f"{path} is not an SQLite database (its first bytes are not the SQLite header)")


def _check_optuna_tables(url: str, engine_kwargs: dict[str, Any], path: Path | None,
                         foreign_only: bool = False) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(driver_url(url), **engine_kwargs)
    try:
        tables = set(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    missing = [t for t in _OPTUNA_TABLES if t not in tables]
    if foreign_only and (not tables or len(missing) < len(_OPTUNA_TABLES)):
        return
    if missing:
        where = path if path is not None else redact_url(url)
        raise StudyError(f"{where} is a database but not an Optuna study storage (no {missing[0]!r} table)")


def _check_driver(url: str) -> None:
    """A missing DB-API module, named with what to install (Optuna would only say 'ImportError')."""
    import sqlalchemy

    try:
        parsed = sqlalchemy.engine.make_url(driver_url(url))
    except Exception:
        raise StudyError(f"not a storage URL: {redact_url(url)} (expected e.g. sqlite:///study.db or "
                         "postgresql://user@host/db)") from None
    try:
        dialect = parsed.get_dialect()
        dialect.import_dbapi()
    except ImportError as exc:
        missing = (getattr(exc, "name", None) or "").split(".")[0]
        fix = (f"pip install {_DRIVERS[missing]}" if missing in _DRIVERS
               else f"install the {missing or 'database'} driver")
        raise StorageUnavailable(f"storage {redact_url(url)}: its database driver is not installed "
                                 f"(no module {missing!r}); {fix}, or name a driver in the URL, "
                                 f"e.g. {parsed.get_backend_name()}+DRIVER://") from None
    except Exception as exc:  # NoSuchModuleError: an unknown dialect
        raise StudyError(f"storage {redact_url(url)}: unknown database kind {parsed.drivername!r} "
                         f"({type(exc).__name__})") from None


def _open_failure(url: str, exc: BaseException) -> StudyError:
    """One line for an exception raised while opening `url`, with the password hidden."""
    text = " ".join(str(getattr(exc, "orig", None) or exc).split())
    text = text.split(" [SQL:")[0].split(" (Background on this error")[0]
    password = url_password(url)
    if password:
        text = text.replace(password, "***")
    text = redact_env({"t": text})["t"][:300]
    path = sqlite_path(url)
    if path is not None and "malformed" in text:
        return StudyError(f"{path} is a damaged SQLite database ({text})")
    if path is not None and "readonly" in text:
        return StudyError(f"{path} is not an Optuna study storage; a read-only command will not change it ({text})")
    if "optuna storage upgrade" in text:
        return StudyError(f"storage {redact_url(url)} was written by another Optuna version: {text}")
    if isinstance(exc, ImportError):
        return StorageUnavailable(f"storage {redact_url(url)}: the database driver is not installed ({text})")
    if path is None:
        return StorageUnavailable(f"cannot open the study storage {redact_url(url)}: {text}")
    return StudyError(f"cannot open the study storage {redact_url(url)}: {text}")


# ----------------------------------------------------------------------------------------- write failures

def write_failure(exc: BaseException, url: str) -> TunerError | None:
    """One line for a write to the study storage that failed for a reason the user can fix (an SQLite
    file on a full or read-only disk, a lock held too long), naming the database and the remedy; None
    for anything else. SQLite rolls a failed write back: the study stays as it was."""
    from ..vocabulary.errors.disk import DiskError, space_left

    path = sqlite_path(url)
    if path is None:
        return None
    inner = exc
    while getattr(inner, "orig", None) is not None or inner.__cause__ is not None:
        inner = getattr(inner, "orig", None) or inner.__cause__
    if not isinstance(inner, sqlite3.Error):
        return None
    text = " ".join(str(inner).split()).lower()
    kept = "SQLite rolled the write back, so the study is intact: re-run the same command to resume"
    if "database or disk is full" in text:
        error = DiskError(f"cannot write the study database {path}: no space left on its file system "
                          f"({space_left(path)}); free some space there; {kept}", path)
    elif "disk i/o error" in text:
        error = DiskError(f"cannot write the study database {path}: disk I/O error ({space_left(path)}; a full "
                          f"disk, or a network file system SQLite cannot lock): free space or use a local disk; {kept}",
                          path)
    elif "database is locked" in text:
        error = StorageUnavailable(
            f"the study database {path} stayed locked by another process for over {SQLITE_LOCK_WAIT_S} s (an open "
            "sqlite3 shell or database browser holding a write, or a network file system without working locks): "
            f"close it; {kept}; tuners on several machines need PostgreSQL (--storage postgresql://...)")
    elif "readonly database" in text or "unable to open database file" in text:
        error = DiskError(f"cannot write the study database {path}: it or its folder is read-only (SQLite writes "
                          f"a journal beside it): make both writable; report and export still read it", path)
    else:
        return None
    return error
