"""tuner/study/nodes.py without a database: URL forms, what counts as an outage, the retry policy."""

from __future__ import annotations

import importlib.util

import pytest
import sqlalchemy.exc

from tuner.study import nodes


@pytest.mark.parametrize("psycopg2", [False, True])
def test_plain_postgresql_urls_run_on_the_installed_driver(monkeypatch, psycopg2):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (object() if psycopg2 else None) if name == "psycopg2" else real(name, *a))
    driver = "psycopg2" if psycopg2 else "psycopg"
    assert nodes.storage_url("postgresql://tuner@db:5432/tuning") == (
        "postgresql://tuner@db:5432/tuning" if psycopg2 else "postgresql+psycopg://tuner@db:5432/tuning")
    assert nodes.storage_url("postgres://tuner@db/tuning") == f"postgresql+{driver}://tuner@db/tuning"
    # An explicit driver and other storages are left alone.
    assert nodes.storage_url("postgresql+psycopg://tuner@db/t") == "postgresql+psycopg://tuner@db/t"
    assert nodes.storage_url("sqlite:///results/x/study.db") == "sqlite:///results/x/study.db"


def test_postgres_engines_check_connections_and_do_not_hang():
    kw = nodes.engine_kwargs("postgresql+psycopg://tuner@db/t")
    assert kw["pool_pre_ping"] is True and kw["connect_args"]["connect_timeout"] == nodes.CONNECT_TIMEOUT_S
    assert nodes.engine_kwargs("sqlite:///x.db") == {}


@pytest.mark.parametrize("grace, interval", [(2, 1), (6, 1), (120, 30), (600, 30), (40, 10)])
def test_heartbeat_interval_gives_several_beats_per_grace(grace, interval):
    assert nodes.heartbeat_interval(grace) == interval


def _refused():
    return sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))


def test_an_outage_is_retried_with_backoff_until_the_database_answers():
    calls, sleeps = [], []

    def flaky():
        calls.append(1)
        if len(calls) <= 3:
            raise _refused()
        return "ok"

    assert nodes.retry_outage(flaky, "get_trial", 60, "postgresql://u@h/db", sleep=sleeps.append) == "ok"
    assert sleeps == [0.5, 1.0, 2.0]
    assert nodes.seconds_since_outage() < 5  # the reaper waits a grace period after it


def test_a_wrong_request_is_not_retried():
    sleeps = []

    def bad():
        raise sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("duplicate key"))

    with pytest.raises(sqlalchemy.exc.IntegrityError):
        nodes.retry_outage(bad, "set", 60, "postgresql://u@h/db", sleep=sleeps.append)
    assert sleeps == []


def test_a_long_outage_ends_in_a_clear_error_without_the_password():
    def down():
        raise _refused()

    with pytest.raises(nodes.StorageUnavailable) as info:
        nodes.retry_outage(down, "ask", 0.0, "postgresql+psycopg://tuner:s3cret@db:5432/tuning", sleep=lambda s: None)
    text = str(info.value)
    assert "s3cret" not in text and "tuner:***@db:5432/tuning" in text and "connection refused" in text


def test_optuna_wrapped_outages_count_too():
    import optuna

    try:
        try:
            raise _refused()
        except sqlalchemy.exc.SQLAlchemyError as e:
            raise optuna.exceptions.StorageInternalError("commit failed") from e
    except optuna.exceptions.StorageInternalError as wrapped:
        assert nodes.is_outage(wrapped)
    assert not nodes.is_outage(ValueError("x"))
