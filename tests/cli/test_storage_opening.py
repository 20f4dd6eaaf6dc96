"""tuner/study/storage.py: readers open read-only (nothing created, nothing changed), writers refuse what is
not theirs, and a URL's password never shows."""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from pathlib import Path

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.study.storage import open_storage, open_storage_readonly, redact_url, url_password
from tuner.vocabulary.errors import RuntimeFailure, StorageUnavailable, StudyError, UserError


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def study_db(tmp_path) -> Path:
    """A real Optuna storage with one study, in a folder whose name needs URI escaping."""
    db = tmp_path / "my results #1" / "50% done.db"
    storage = open_storage(f"sqlite:///{db}")  # creates the folder, as tune does
    study = optuna.create_study(study_name="s", storage=storage, directions=["maximize", "minimize"])
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, values=[1.0, 2.0]))
    storage.engine.dispose()
    return db


def test_a_reader_reads_and_changes_nothing(study_db: Path):
    before = _tree(study_db.parent)
    storage = open_storage_readonly(f"sqlite:///{study_db}")
    study = optuna.load_study(study_name="s", storage=storage)
    assert [t.values for t in study.trials] == [[1.0, 2.0]]
    with pytest.raises(optuna.exceptions.StorageInternalError) as info:  # SQLite itself refuses writes
        study.set_user_attr("x", 1)
    assert "readonly" in str(info.value.__cause__)
    storage.engine.dispose()
    assert _tree(study_db.parent) == before  # same bytes, no journal or new file left


@pytest.mark.parametrize("content,needle", [
    (b"", "is an empty file"), (b"SQLite format 2\0" + b"\0" * 100, "not an SQLite database"),
    (b"hello", "not an SQLite database"),
])
def test_a_reader_refuses_what_is_not_a_database_before_opening_it(tmp_path, content, needle):
    path = tmp_path / "f.db"
    path.write_bytes(content)
    with pytest.raises(StudyError, match=needle):
        open_storage_readonly(f"sqlite:///{path}")
    assert path.read_bytes() == content


def test_a_reader_never_creates_a_missing_database(tmp_path):
    with pytest.raises(StudyError, match="file not found"):
        open_storage_readonly(f"sqlite:///{tmp_path}/sub/none.db")
    assert list(tmp_path.iterdir()) == []


def test_a_writer_will_not_add_tables_to_another_programs_database(tmp_path):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE users (name TEXT)")
    before = path.read_bytes()
    with pytest.raises(StudyError, match=r"not an Optuna study storage .*; choose another storage path"):
        open_storage(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_a_missing_driver_is_a_runtime_failure_with_the_password_hidden(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg2", None)  # not installed, whatever this machine has
    with pytest.raises(StorageUnavailable) as info:
        open_storage_readonly("postgresql+psycopg2://u:pa55word@h/db")
    assert "pa55word" not in str(info.value) and "pip install psycopg2-binary" in str(info.value)
    assert isinstance(info.value, RuntimeFailure) and info.value.exit_code == 1
    with pytest.raises(StudyError, match="unknown database kind") as info:
        open_storage_readonly("postgresql+nosuchdriver://u:pa55word@h/db")
    assert "pa55word" not in str(info.value) and info.value.exit_code == 2
    assert isinstance(StudyError("x"), UserError) and StudyError("x").exit_code == 2


@pytest.mark.parametrize("url,shown", [
    ("postgresql://tuner:pw@db/x", "postgresql://tuner:***@db/x"),
    ("postgresql+psycopg2://tuner:p/w:@db:5432/x?sslmode=require", "postgresql+psycopg2://tuner:***@db:5432/x?sslmode=require"),
    ("mysql://u:p@ss@host/db", "mysql://u:***@host/db"),
    ("postgresql://tuner@db/x", "postgresql://tuner@db/x"),
    ("sqlite:///results/a:b@c.db", "sqlite:///results/a:b@c.db"),
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown


PASSWORDS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="\n"),
                    min_size=1, max_size=20)


# tests/properties/conftest.py's profile, here too: this file may run without that folder (tests/cli
# alone), and the default profile's too_slow check and deadline fail it on a busy machine
@settings(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["postgresql", "mysql+pymysql", "http"]), st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
       PASSWORDS, st.from_regex(r"[a-z0-9.-]{1,12}(:[0-9]{1,5})?", fullmatch=True))
def test_the_password_never_survives_redaction(scheme, user, password, host):
    url = f"{scheme}://{user}:{password}@{host}/db"
    assert url_password(url) == password
    shown = redact_url(url)
    assert shown == f"{scheme}://{user}:***@{host}/db"


def test_a_writer_takes_an_sqlite_file_without_tables(tmp_path):
    path = tmp_path / "new.db"
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA user_version = 1")  # a valid, non-empty database with no table yet
    assert path.stat().st_size > 0
    storage = open_storage(f"sqlite:///{path}")
    optuna.create_study(study_name="s", storage=storage)
    storage.engine.dispose()
    assert [s.study_name for s in optuna.get_all_study_summaries(open_storage_readonly(f"sqlite:///{path}"))] == ["s"]


def test_a_study_is_named_by_its_database_file_or_a_renamed_folder(study_db: Path, tmp_path):
    # `report results/s/study.db`, a study.db copied elsewhere, a study folder renamed: its one study is read,
    # and nothing in the folder changes
    from tuner.commands import UsageError
    from tuner.commands.studyargs import load_study

    before = _tree(study_db.parent)
    study, folder = load_study(str(study_db), tmp_path / "results", None)
    assert study.study_name == "s" and folder == study_db.parent
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    (renamed / "study.db").write_bytes(study_db.read_bytes())
    assert load_study(str(renamed), tmp_path / "results", None)[0].study_name == "s"
    assert _tree(study_db.parent) == before
    with pytest.raises(UsageError, match="no study at .*nothing.db; give the study name"):
        load_study(str(tmp_path / "nothing.db"), tmp_path / "results", None)
