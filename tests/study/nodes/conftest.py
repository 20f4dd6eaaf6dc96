"""A genuine PostgreSQL server on loopback for the many-nodes tests.

The server binaries come from the system (Debian's `postgresql` package, which .ci/run installs):
initdb into a temporary directory, `postgres` started on 127.0.0.1 on a free port with its unix
socket in that directory, a password-protected role whose password reaches the tuners through
PGPASSWORD only, and a fresh database per test. Running as root (PostgreSQL refuses root), the
server runs as the `postgres` user (Popen's user=, no shell, no su). Skipped, saying why, only when
no server binaries exist.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tuner.serve.ports import find_free_port

ROLE, PASSWORD = "tuner", "pw-" + uuid.uuid4().hex[:12]  # a per-session password, never on a command line


def server_bindir() -> Path | None:
    """The newest PostgreSQL server installation: Debian's /usr/lib/postgresql/<v>/bin, else PATH."""
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                    key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    if debian:
        return debian[-1].parent
    found = shutil.which("postgres")
    return Path(found).parent if found and shutil.which("initdb") else None


class PgServer:
    """One PostgreSQL cluster in a temporary directory; start/stop/restart keep its port and data."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="bt-pg-"))  # not under pytest's root-only tmp dirs
        self.data, self.sock = self.root / "data", self.root
        self.port = find_free_port()
        self.proc: subprocess.Popen | None = None
        self.as_user: dict = {}
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres") if _has_user("postgres") else None
            if pw is None:
                pytest.skip("PostgreSQL refuses to run as root and there is no 'postgres' user")
            self.as_user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.root.chmod(0o700)
        pwfile = self.root / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if self.as_user:
            os.chown(pwfile, self.as_user["user"], self.as_user["group"])
        subprocess.run([str(bindir / "initdb"), "-D", str(self.data), "-U", ROLE, f"--pwfile={pwfile}",
                        "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True, env=self._env(), **self.as_user)
        pwfile.unlink()

    def _env(self) -> dict:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}

    def start(self, timeout_s: float = 30.0) -> None:
        log = open(self.root / "server.log", "ab")
        self.proc = subprocess.Popen(
            [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.sock}",
             "-c", "fsync=off", "-c", "max_connections=100"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=self._env(), **self.as_user)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {(self.root / 'server.log').read_text()[-1500:]}")
            if self._ready():
                return
            time.sleep(0.1)
        raise RuntimeError("postgres did not accept connections in time")

    def _ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(host="127.0.0.1", port=self.port, user=ROLE, password=PASSWORD,
                                 dbname="postgres", connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        """Fast shutdown (what `pg_ctl stop -m fast` sends: SIGINT), then SIGKILL of the group."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the backends, if any lingered
        except (ProcessLookupError, PermissionError):
            pass
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def create_database(self) -> str:
        import psycopg

        name = "study_" + uuid.uuid4().hex[:10]
        with psycopg.connect(host="127.0.0.1", port=self.port, user=ROLE, password=PASSWORD,
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def url(self, db: str, scheme: str = "postgresql") -> str:
        return f"{scheme}://{ROLE}@127.0.0.1:{self.port}/{db}"  # the password comes from PGPASSWORD

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def _skip(request, msg: str) -> None:
    """Skip, and say why on the terminal now (past pytest's capture), not only with -rs."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        if reporter is not None:
            reporter.write_line(f"[nodes] SKIPPING the PostgreSQL tests: {msg}")
    pytest.skip(msg)


def _new_server(request) -> PgServer:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _skip(request, "psycopg 3 is not installed: pip install -e '.[postgres]'")
    bindir = server_bindir()
    if bindir is None:
        _skip(request, "no PostgreSQL server binaries (initdb, postgres): apt-get install postgresql")
    server = PgServer(bindir)
    server.start()
    return server


@pytest.fixture(scope="session")
def pg_server(request):
    server = _new_server(request)
    yield server
    server.close()


@pytest.fixture
def pg_url(pg_server):
    """A fresh database on the shared server: its postgresql:// URL (no password in it)."""
    return pg_server.url(pg_server.create_database())


@pytest.fixture
def own_pg_server(request):
    """A server of the test's own, for tests that restart it."""
    server = _new_server(request)
    yield server
    server.close()


@pytest.fixture
def pg_env():
    """The environment of a tuner process: the password through PGPASSWORD, never argv."""
    return {**os.environ, "PGPASSWORD": PASSWORD}
