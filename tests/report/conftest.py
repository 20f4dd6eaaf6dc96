"""Two small studies on the simulator, made once per test session: `rpt` (fork 1.21.2) with a
release-defaults trial, a calculator trial, a good trial, a trial the release rejects before boot
and one that runs out of memory in warmup; `rpt2` (fork 1.22) for the comparison."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
import yaml

from . import browser

SPACE = {
    "name": "rpt",
    "release": "fork-1.21.2",
    "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
    "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
    "parameters": {
        "max_num_seqs": {"type": "categorical", "choices": [8, 16]},
        "VLLM_PROMPT_SEQ_BUCKET_STEP": {"type": "categorical", "choices": [128, 256]},
        # 64 is above the prompt batch maximum (= max_num_seqs): the release refuses it before boot.
        "VLLM_PROMPT_BS_BUCKET_MIN": {"type": "categorical", "choices": [1, 64]},
        "fault": {"env": "BUCKET_TUNER_SIM_FAULT", "type": "categorical", "choices": ["none", "oom-warmup"]},
    },
}
FAST = ["--num-prompts", "24", "--num-warmups", "2", "--max-concurrency", "8", "--random-input-len", "200",
        "--random-output-len", "24", "--random-range-ratio", "0.5", "--time-scale", "0.2",
        "--startup-time-scale", "0.002"]
# Generous limits, so that every measured trial is feasible (a runtime recompile depends on timing:
# allowed), yet recorded as the study's limits. The p99 and the live warm-up watch are measured on the
# wall clock of a time-scaled simulator (x 1 / 0.2 and x 1 / 0.002): these need stalls of 120 s and
# 100 s to flip, where a busy two-core machine has shown 8 s.
LIMITS = ["--slo", "p99_ttft_ms=600000", "--warmup-budget", "50000", "--allow-recompiles"]
TRIALS = [  # (seed label, parameters): run in this order
    ("release defaults", {"max_num_seqs": 8, "VLLM_PROMPT_SEQ_BUCKET_STEP": 128, "VLLM_PROMPT_BS_BUCKET_MIN": 1,
                          "fault": "none"}),
    ("calculator", {"max_num_seqs": 16, "VLLM_PROMPT_SEQ_BUCKET_STEP": 256, "VLLM_PROMPT_BS_BUCKET_MIN": 1,
                    "fault": "none"}),
    ("", {"max_num_seqs": 8, "VLLM_PROMPT_SEQ_BUCKET_STEP": 128, "VLLM_PROMPT_BS_BUCKET_MIN": 64, "fault": "none"}),
    ("", {"max_num_seqs": 8, "VLLM_PROMPT_SEQ_BUCKET_STEP": 128, "VLLM_PROMPT_BS_BUCKET_MIN": 1,
          "fault": "oom-warmup"}),
    ("", {"max_num_seqs": 16, "VLLM_PROMPT_SEQ_BUCKET_STEP": 128, "VLLM_PROMPT_BS_BUCKET_MIN": 1, "fault": "none"}),
]


@dataclass
class Studies:
    results: Path
    tune_output: str  # what `tune` printed (stdout and stderr) at COLUMNS=80

    def load(self, name: str = "rpt") -> optuna.Study:
        return optuna.load_study(study_name=name, storage=f"sqlite:///{self.results / name / 'study.db'}")


def cli(*args: str, columns: int = 80) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS=str(columns))
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def _make(root: Path, name: str, release: str, trials) -> subprocess.CompletedProcess:
    space = root / f"{name}.yaml"
    space.write_text(yaml.safe_dump({**SPACE, "name": name, "release": release}))
    folder = root / "results" / name
    folder.mkdir(parents=True)
    study = optuna.create_study(study_name=name, storage=f"sqlite:///{folder / 'study.db'}",
                                directions=["maximize", "minimize", "minimize"])
    for seed, params in trials:
        study.enqueue_trial(params, user_attrs={"seed": seed} if seed else None)
    return cli("tune", "--space", str(space), "--results", str(root / "results"), "--n-trials", str(len(trials)),
               *FAST, *LIMITS, "--no-screening")  # exactly these trials, counted as enqueued


@pytest.fixture(scope="session")
def studies(tmp_path_factory) -> Studies:
    root = tmp_path_factory.mktemp("report-studies")
    first = _make(root, "rpt", "fork-1.21.2", TRIALS)
    assert first.returncode == 0, first.stderr
    second = _make(root, "rpt2", "fork-1.22", [TRIALS[0], TRIALS[4]])
    assert second.returncode == 0, second.stderr
    return Studies(results=root / "results", tune_output=first.stdout + first.stderr)


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium per test module; skipped with its reason where none can be driven."""
    reason = browser.available()
    if reason:
        print(f"browser tests skipped: {reason}")
        pytest.skip(reason)
    b = browser.Browser()
    yield b
    b.close()
