"""A study on a real small file system that fills up or is read-only (a tmpfs mounted for the test;
skipped, saying why, where mounting is not allowed), and an SQLite study locked too long: each is one
line naming the path and the remedy (tuner/vocabulary/errors/disk.py, tuner/study/storage.py write_failure), never
an "internal error"; the study stays intact and resumes; `report` and `export` still work read-only.
Quota and permission errors, which a test cannot cause for real as root, are in tests/cli/test_disk_errors.py.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from tuner.cli import main

from ..conftest import ROOT
from .test_study_e2e import FAST, SPACE, _read, assert_no_server_left, write_space

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and tmpfs")

TWO_CONFIGS = {**SPACE, "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16]}}}


def _mount(path: Path, options: str) -> str | None:
    """Mount a tmpfs at path; the reason it could not be, or None."""
    try:
        run = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if run.returncode == 0 else (run.stderr.strip() or f"mount exited {run.returncode}")


@pytest.fixture
def small_disk(tmp_path, capsys):
    """A 32 MiB tmpfs (room for a study and a trial's logs, and for the tuner's 16 MiB check before a boot)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    why = _mount(disk, "size=32m")
    if why is not None:
        with capsys.disabled():
            print(f"\nSKIPPED: cannot mount a small tmpfs here ({why}); the disk-full paths are covered "
                  "only by tests/cli/test_disk_errors.py")
        pytest.skip(f"cannot mount a tmpfs: {why}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)


def fill(disk: Path) -> Path:
    """Write a filler file until the file system refuses another byte."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    assert os.statvfs(disk).f_bavail == 0
    return filler


def tune_argv(space: Path, results: Path, n: int, *extra: str) -> list[str]:
    return ["tune", "--space", str(space), "--results", str(results), "--n-trials", str(n), "--no-seed-defaults",
            *FAST, *extra]


def study_at(results: Path) -> optuna.Study:
    return optuna.load_study(study_name="e2e", storage=f"sqlite:///{results / 'e2e' / 'study.db'}")


def integrity(db: Path) -> str:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_a_disk_that_fills_mid_trial_stops_the_study_with_one_line_and_it_resumes(tmp_path, small_disk):
    space, results = write_space(tmp_path, TWO_CONFIGS), small_disk / "results"
    cmd = [sys.executable, "-m", "tuner.cli", *tune_argv(space, results, 2, "--startup-time-scale", "0.02")]
    tuner = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        log = results / "e2e" / "trials" / "0000" / "server.log"
        deadline = time.monotonic() + 60
        while "[Warmup]" not in _read(log) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "[Warmup]" in _read(log), "the first trial never reached warmup"
        filler = fill(small_disk)  # the disk fills while the server warms up
        _, err = tuner.communicate(timeout=120)
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
    assert tuner.returncode == 1, err[-2000:]
    line = last_line(err)
    assert line.startswith(f"bucket-tuner tune: error: cannot write {results}"), line
    assert "no space left on its file system (" in line and "free some space there" in line, line
    assert "re-run the same command to resume" in line
    assert "internal error" not in err and "Traceback" not in err
    db = results / "e2e" / "study.db"
    assert integrity(db) == "ok"
    assert not list((results / "e2e" / "run").glob("server-*.json")), "a run record was left"
    assert not [p for p in (results / "e2e" / "trials" / "0000").iterdir() if p.name.endswith(".tmp")]
    # The trial in flight is recorded interrupted, or (the database was full too) left RUNNING for the
    # next run to fail and enqueue again: either way its settings run again.
    first = study_at(results).trials[0]
    assert (first.state.name, first.user_attrs.get("status")) in (("FAIL", "interrupted"), ("RUNNING", None))

    filler.unlink()
    again = subprocess.run([sys.executable, "-m", "tuner.cli", *tune_argv(space, results, 2)], cwd=ROOT,
                           capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-2000:]
    study = study_at(results)
    assert not [t.number for t in study.trials if t.state.name == "RUNNING"]
    counted = [t for t in study.trials if t.state.name == "COMPLETE" and not t.user_attrs.get("screened")]
    assert len(counted) == 2 and any(t.user_attrs.get("requeued_from") == 0 for t in counted)
    assert_no_server_left(study)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_report_and_export_work_read_only_on_a_full_disk(tmp_path, small_disk, capsys):
    space, results = write_space(tmp_path, TWO_CONFIGS), small_disk / "results"
    assert main(tune_argv(space, results, 1, "--no-report")) == 0
    folder, db = results / "e2e", results / "e2e" / "study.db"
    capsys.readouterr()
    fill(small_disk)
    before = _sha(db)

    assert main(["report", "e2e", "--results", str(results)]) == 1
    out, err = capsys.readouterr()
    assert "Pareto front" in out and "balanced pick" in out  # the tables need no disk
    line = last_line(err)
    assert line.startswith(f"bucket-tuner report: error: cannot write trials.csv, pareto.csv, report.html in {folder}: "
                           "no space left on its file system (0 B free of "), line
    assert "or write elsewhere (--out DIR)" in line and "the study is unchanged" in line
    assert len(err.strip().splitlines()) == 1
    assert not [p.name for p in folder.iterdir() if p.suffix in (".csv", ".html", ".tmp")]  # no half files

    assert main(["report", "e2e", "--results", str(results), "--out", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "report.html").exists() and (tmp_path / "elsewhere" / "trials.csv").exists()

    assert main(["export", "e2e", "--results", str(results)]) == 0  # printed: no disk needed
    assert "# bucket-tuner export: study e2e" in capsys.readouterr().out
    assert main(["export", "e2e", "--results", str(results), "-o", str(small_disk / "best.env")]) == 1
    line = last_line(capsys.readouterr().err)
    assert line.startswith(f"bucket-tuner export: error: cannot write {small_disk / 'best.env'}: no space left"), line
    assert not (small_disk / "best.env").exists()
    assert _sha(db) == before and integrity(db) == "ok"


def test_a_read_only_results_folder_is_one_line_and_the_study_still_reads(tmp_path, small_disk, capsys):
    space, results = write_space(tmp_path, TWO_CONFIGS), small_disk / "results"
    assert main(tune_argv(space, results, 1, "--no-report")) == 0
    # The same folder through a read-only bind mount (a container's readOnly volume, say).
    view = tmp_path / "read-only"
    view.mkdir()
    bound = subprocess.run(["mount", "--bind", str(small_disk), str(view)], capture_output=True, text=True)
    if bound.returncode:
        pytest.skip(f"cannot bind-mount: {bound.stderr.strip()}")
    try:
        remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], capture_output=True, text=True)
        if remount.returncode:
            pytest.skip(f"cannot remount read-only: {remount.stderr.strip()}")
        results = view / "results"
        db = results / "e2e" / "study.db"
        capsys.readouterr()
        assert main(tune_argv(space, results, 2)) == 1
        err = capsys.readouterr().err
        line = last_line(err)
        assert line.startswith("bucket-tuner tune: error: cannot write "), line
        assert str(results / "e2e") in line and "read-only" in line, line
        assert "internal error" not in err
        assert main(["report", "e2e", "--results", str(results)]) == 1
        out, err = capsys.readouterr()
        assert "balanced pick" in out
        assert "its file system is mounted read-only; use a writable folder, or write elsewhere (--out DIR)" in err
        assert main(["report", "e2e", "--results", str(results), "--out", str(tmp_path / "out")]) == 0
        assert integrity(db) == "ok"
    finally:
        subprocess.run(["umount", "-l", str(view)], capture_output=True, timeout=30)


def test_an_sqlite_study_locked_too_long_is_named_with_its_remedy(tmp_path, capsys, monkeypatch):
    from tuner.study import storage

    monkeypatch.setattr(storage, "SQLITE_LOCK_WAIT_S", 1)  # the tuner waits 60 s; the test holds it longer
    space, results = write_space(tmp_path, TWO_CONFIGS), tmp_path / "results"
    db = results / "e2e" / "study.db"
    db.parent.mkdir(parents=True)
    optuna.create_study(study_name="e2e", storage=f"sqlite:///{db}", directions=["maximize", "minimize", "minimize"])
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holding a write (an open sqlite3 shell, say)
    try:
        assert main(tune_argv(space, results, 1)) == 1
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    line = last_line(capsys.readouterr().err)
    assert line.startswith(f"bucket-tuner tune: error: the study database {db} stayed locked by another process "
                           "for over 1 s"), line
    assert "close it" in line and "PostgreSQL" in line and "the study is intact" in line
    assert integrity(db) == "ok"
