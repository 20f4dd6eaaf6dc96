"""A small study on the simulator made through the CLI, for the cache tests: the space written to
ROOT/space.yaml, chosen settings enqueued first (so the trials are known), then `tune` run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import yaml


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, COLUMNS="100"), timeout=300)


def tune_enqueued(root: Path, space: dict, enqueued: list[dict], *args: str) -> subprocess.CompletedProcess:
    """`tune --space ROOT/space.yaml --results ROOT/results --n-trials len(enqueued) ARGS` on a study whose
    first trials are `enqueued`; returns the finished process (the caller asserts its exit code)."""
    (root / "space.yaml").write_text(yaml.safe_dump(space))
    folder = root / "results" / space["name"]
    folder.mkdir(parents=True)
    study = optuna.create_study(study_name=space["name"], storage=f"sqlite:///{folder / 'study.db'}",
                                directions=["maximize", "minimize", "minimize"])
    for params in enqueued:
        study.enqueue_trial(params)
    return cli("tune", "--space", str(root / "space.yaml"), "--results", str(root / "results"),
               "--n-trials", str(len(enqueued)), *args, cwd=root)
