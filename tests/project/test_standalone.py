"""The repository stands on its own: nothing reads a folder beside the checkout, and the tests that
read facts (vectors, log samples) pass from a copy placed in an empty directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..conftest import ROOT

SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", "build", "dist", ".ruff_cache"}
OUTPUT_ROOT = "results"  # the default output folder at the top (tuner/results/ is a package)


def _tracked_files() -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")
                       and not (Path(dirpath) == ROOT and d == OUTPUT_ROOT)]
        out += [Path(dirpath) / f for f in filenames if not f.endswith(".pyc")]
    return out


def test_no_file_points_outside_the_checkout():
    # Built from pieces so that this file does not match itself.
    shared = "shared"
    needles = (f"../{shared}", f"BUCKET_TUNER_{shared.upper()}", f"{shared}/spec", f"{shared}/vectors",
               f"{shared}/log-samples")
    offenders = []
    for path in _tracked_files():
        if path.suffix not in {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".txt", ""} and path.name != "run":
            continue
        text = path.read_text(errors="replace")
        offenders += [f"{path.relative_to(ROOT)}: {n}" for n in needles if n in text]
    assert not offenders, offenders


def test_fact_reading_tests_pass_from_a_copy_in_an_empty_directory(tmp_path):
    copy = tmp_path / "empty" / "bucket-tuner"
    for path in _tracked_files():
        dest = copy / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    assert not (copy.parent / "shared").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUCKET_TUNER")}
    env["PYTHONPATH"] = str(copy)  # the copy's own `tuner`, not the checkout's editable install
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-n", "0",
         # the logparse files that read the shipped logs (the rest of tests/logparse reads no file)
         "tests/buckets/test_vectors.py", "tests/logparse/test_real_logs.py", "tests/logparse/test_plugin_tqdm.py",
         "tests/sim/test_sim_calibration.py",
         "tests/buckets/test_calc.py",
         "-k", "not standalone and not cli"],  # the facts, not the command line again
        cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    probe = subprocess.run([sys.executable, "-c", "import tuner; print(tuner.__file__)"],
                           cwd=copy, env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip().startswith(str(copy)), probe.stdout
