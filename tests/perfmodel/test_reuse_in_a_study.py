"""A real study on the simulator: a configuration whose effective settings were measured is not booted
again (its record answers), --remeasure boots it deliberately and averages, and every boot calibrates."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from tuner.cli import main

SPACE = {
    "name": "reuse",
    "release": "fork-1.22",  # exponential by default: the linear step variables are not read
    "server": {"max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048},
    "parameters": {
        "max_num_seqs": {"type": "categorical", "choices": [8, 16]},
        "VLLM_DECODE_BS_BUCKET_STEP": {"type": "categorical", "choices": [8, 16]},
    },
}
FAST = ["--num-prompts", "16", "--num-warmups", "2", "--max-concurrency", "8", "--random-input-len", "200",
        "--random-output-len", "16", "--time-scale", "0.2", "--startup-time-scale", "0.002", "--no-seed-defaults",
        "--no-report"]


def tune(tmp_path: Path, *extra: str) -> optuna.Study:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    assert main(["tune", "--space", str(space), "--results", str(tmp_path / "results"), *FAST, *extra]) == 0
    return study(tmp_path)


def study(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name="reuse", storage=f"sqlite:///{tmp_path / 'results' / 'reuse' / 'study.db'}")


def enqueue(tmp_path: Path, *params: dict) -> None:
    (tmp_path / "results" / "reuse").mkdir(parents=True, exist_ok=True)
    s = optuna.create_study(study_name="reuse", storage=f"sqlite:///{tmp_path / 'results' / 'reuse' / 'study.db'}",
                            directions=["maximize", "minimize", "minimize"], load_if_exists=True)
    for p in params:
        s.enqueue_trial(p)


def test_measured_configuration_is_reused_then_remeasured_on_request(tmp_path):
    enqueue(tmp_path, {"max_num_seqs": 8, "VLLM_DECODE_BS_BUCKET_STEP": 8},
            {"max_num_seqs": 8, "VLLM_DECODE_BS_BUCKET_STEP": 16},  # the same server for fork-1.22
            {"max_num_seqs": 16, "VLLM_DECODE_BS_BUCKET_STEP": 8})
    s = tune(tmp_path, "--n-trials", "2")
    first, again, other = sorted(s.trials, key=lambda t: t.number)
    assert [t.user_attrs["status"] for t in (first, again, other)] == ["ok"] * 3
    assert again.user_attrs["screened"] == "reused" and not again.user_attrs["booted"]
    assert again.user_attrs["effective_key"] == first.user_attrs["effective_key"] != other.user_attrs["effective_key"]
    assert again.values == first.values and "reused from trial 0" in again.user_attrs["reason"]
    assert not (tmp_path / "results" / "reuse" / "trials" / "0001" / "server.log").exists()
    assert (tmp_path / "results" / "reuse" / "trials" / "0002" / "server.log").exists()

    # Every boot calibrated the model; the simulator is the documented model, so memory agrees exactly.
    cal = s.user_attrs["calibration"]
    assert cal["boots"] == 2 and cal["kv_block"]["n"] == 2
    for t in (first, other):
        sample, pred, obs = t.user_attrs["calibration_sample"], t.user_attrs["predicted"], t.user_attrs["observed"]
        assert abs(sample["kv_block"]) < 0.01
        assert pred["kv_blocks"] == obs["kv_blocks"] and pred["decode_buckets"] == obs["decode_buckets"]
        assert pred["warmup_s"] > 0 and obs["warmup_s"] > 0 and "median_tpot_ms" in pred

    # --remeasure 2: the same configuration boots once more and is told the mean of both measurements.
    enqueue(tmp_path, {"max_num_seqs": 8, "VLLM_DECODE_BS_BUCKET_STEP": 16})
    s = tune(tmp_path, "--n-trials", "3", "--remeasure", "2")
    last = max(s.trials, key=lambda t: t.number)
    assert last.user_attrs["booted"] and last.user_attrs["observed"]["measurements"] == 2
    assert last.user_attrs["effective_key"] == first.user_attrs["effective_key"]
    assert not last.user_attrs.get("screened")


def test_remeasure_must_be_positive(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    assert main(["tune", "--space", str(space), "--results", str(tmp_path / "r"), "--remeasure", "0", *FAST]) == 2
    assert "--remeasure must be at least 1, got 0" in capsys.readouterr().err
