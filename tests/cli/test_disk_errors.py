"""Disk failures a test cannot cause for real as root (a quota, a permission bit root ignores), told
the way a full or read-only disk is (tests/study/test_disk_full.py does those for real): one line,
the path, the remedy, exit 1; files are written whole or not at all (tuner/vocabulary/errors/disk.py)."""

from __future__ import annotations

import errno
import os

import pytest

from tuner.cli import classify, report_failure
from tuner.vocabulary.errors import disk as diskwrite
from tuner.vocabulary.errors.disk import DiskError, write_text

CASES = [
    (errno.ENOSPC, "no space left on its file system (", "free some space there"),
    (errno.EDQUOT, "the disk quota is used up (", "free some of the quota (or ask for more)"),
    (errno.EROFS, "its file system is mounted read-only", "use a writable folder"),
    (errno.EACCES, "permission denied", "make the folder writable for this user"),
    (errno.EPERM, "operation not permitted", "make the folder writable for this user"),
]


@pytest.mark.parametrize("code,said,remedy", CASES)
def test_a_refused_write_keeps_the_old_file_and_names_path_and_remedy(tmp_path, monkeypatch, code, said, remedy):
    path = tmp_path / "report.html"
    path.write_text("the previous report")

    def refuse(src, dst):
        raise OSError(code, os.strerror(code))  # as the kernel reports it: no file name

    monkeypatch.setattr(diskwrite.os, "replace", refuse)
    with pytest.raises(DiskError) as info:
        write_text(path, "x" * 10000, elsewhere="--out DIR")
    message = str(info.value)
    assert message.startswith(f"cannot write {path}: {said}"), message
    assert f"{remedy}, or write elsewhere (--out DIR)" in message
    assert path.read_text() == "the previous report"  # never half a file
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary file left
    code_, line = classify(info.value)
    assert code_ == 1 and line == message


@pytest.mark.parametrize("code,said,remedy", CASES)
def test_an_os_error_reaching_the_command_line_is_one_line_not_a_bug_report(tmp_path, capsys, code, said, remedy):
    named = OSError(code, os.strerror(code), str(tmp_path / "x.csv"))
    assert report_failure(named, "report", ["report", "s"], debug=False) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"bucket-tuner report: error: cannot write {tmp_path / 'x.csv'}: {said}"), err
    assert remedy in err and "internal error" not in err and len(err.strip().splitlines()) == 1
    # Without a file name (a failed write() rather than open()), still no bug report: --debug shows where.
    assert report_failure(OSError(code, os.strerror(code)), "tune", ["tune"], debug=False) == 1
    err = capsys.readouterr().err
    assert err.startswith("bucket-tuner tune: error: cannot write a file: ") and "--debug shows which file" in err


def test_free_space_is_checked_before_a_boot(tmp_path):
    diskwrite.require_space(tmp_path, need=1)  # there is a byte
    with pytest.raises(DiskError) as info:
        diskwrite.require_space(tmp_path / "study" / "trials", need=1 << 50, elsewhere="--results DIR")
    message = str(info.value)
    assert message.startswith(f"cannot write {tmp_path / 'study' / 'trials'}: no space left on its file system (")
    assert "a trial needs 1048576.0 GiB" in message and "or write elsewhere (--results DIR)" in message


@pytest.mark.parametrize("said,expected", [
    ("database or disk is full", "no space left on its file system"),
    ("disk I/O error", "disk I/O error"),
    ("database is locked", "stayed locked by another process"),
    ("attempt to write a readonly database", "it or its folder is read-only"),
])
def test_sqlite_write_failures_name_the_database(tmp_path, said, expected):
    import sqlite3

    import sqlalchemy.exc

    from tuner.study.storage import write_failure

    db = tmp_path / "study.db"
    wrapped = sqlalchemy.exc.OperationalError("UPDATE trials ...", {}, sqlite3.OperationalError(said))
    error = write_failure(wrapped, f"sqlite:///{db}")
    assert error is not None and str(error).startswith(f"cannot write the study database {db}" if "locked" not in said
                                                       else f"the study database {db} stayed locked")
    assert expected in str(error)
    assert classify(error)[0] == 1
    assert write_failure(wrapped, "postgresql://u@h/db") is None  # a server storage: its own messages
    assert write_failure(ValueError(said), f"sqlite:///{db}") is None  # only what SQLite itself said
