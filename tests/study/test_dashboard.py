"""What a trial leaves for optuna-dashboard: its figures as plain numbers (sortable there), its one-line
story as a note, its env file, serve config and server log as artifacts, nothing secret in them; and the
same study without optuna-dashboard installed: figures only, said once."""

from __future__ import annotations

import sys

import optuna
import pytest

from tuner.serve.backends import Backend
from tuner.space.schema import TrialSettings
from tuner.study.dashboard import MISSING, TrialDashboard, trial_figures
from tuner.study.options import Constraints, Objectives
from tuner.study.tell import tell_result
from tuner.trial.run import TrialResult
from tuner.vocabulary.status import TrialStatus

MEASURED = TrialResult(
    status=TrialStatus.OK, booted=True,
    metrics={"output_throughput": 812.5, "p99_ttft_ms": 140.0, "median_tpot_ms": 11.5, "failed": 0,
             "date": "20261128", "cost_usd_per_mtok": 0.42, "p99_e2el_ms": float("nan")},
    observed={"warmup_s": 291.0, "kv_blocks": 4111, "prompt_buckets": 22, "decode_buckets": 132,
              "not_warmed_up": 2, "buckets_not_prepared": 0, "compile_steps_under_load": 1, "preemptions": 3},
    predicted={"warmup_s": 280.0, "prompt_buckets": 22, "decode_buckets": 130},
    artifacts={"server_log": ""})


def test_figures_are_plain_numbers_of_what_the_trial_measured():
    figures = trial_figures(MEASURED, Objectives())
    assert figures == {"output_throughput": 812.5, "p99_ttft_ms": 140.0, "median_tpot_ms": 11.5,
                       "failed_requests": 0, "warmup_s": 291.0, "predicted_warmup_s": 280.0, "kv_blocks": 4111,
                       "prompt_buckets": 22, "decode_buckets": 132, "recompiles": 3, "preemptions": 3,
                       "cost_usd_per_mtok": 0.42}  # a NaN and a text are left out
    rejected = TrialResult(status=TrialStatus.WARMUP_OVER_BUDGET, predicted={"warmup_s": 900.0, "prompt_buckets": 40})
    # not booted: the buckets the release would build, the warm-up predicted; nothing measured
    assert trial_figures(rejected, Objectives()) == {"predicted_warmup_s": 900.0, "prompt_buckets": 40}


def _trial_files(tmp_path, server_args):
    trial_dir = tmp_path / "trials" / "0000"
    trial_dir.mkdir(parents=True)
    (trial_dir / "trial.env").write_text("VLLM_PROMPT_BS_BUCKET_MIN=1\n")
    (trial_dir / "server.log").write_text("INFO Warmup finished in 291 s\n")
    result = TrialResult(**{**MEASURED.__dict__, "artifacts": {"server_log": str(trial_dir / "server.log")}})
    backend = Backend(kind="vllm", model="m", extra_args=server_args)
    return trial_dir, result, backend


def _ask(tmp_path):
    study = optuna.create_study(directions=Objectives().directions)
    return study, study.ask()


def test_a_trial_carries_its_note_and_artifacts_and_no_secret(tmp_path):
    pytest.importorskip("optuna_dashboard")
    from optuna_dashboard._note import get_note_from_system_attrs

    secret = "sk-live-abcdef123456"
    trial_dir, result, backend = _trial_files(tmp_path, ["--api-key", secret, "--enable-prefix-caching"])
    study, trial = _ask(tmp_path)
    dash = TrialDashboard(tmp_path, backend)
    assert dash.missing is None
    uploaded = dash.attach(trial, trial_dir, result, TrialSettings(server={"max_num_seqs": 8}, env={}, params={}))
    assert sorted(uploaded) == ["server.log", "trial.env", "trial.vllm.yaml"]
    tell_result(study, trial, result, Objectives(), Constraints(slos_ms={"p99_ttft_ms": 100}))
    dash.note(trial, result, Objectives(), Constraints(slos_ms={"p99_ttft_ms": 100}))

    frozen = study.trials[0]
    metas = optuna.artifacts.get_all_artifact_meta(frozen, storage=study._storage)
    assert {m.filename for m in metas} == set(uploaded)
    stored = {m.filename: (tmp_path / "artifacts" / m.artifact_id).read_text() for m in metas}
    assert "max-num-seqs: 8" in stored["trial.vllm.yaml"] and "enable-prefix-caching: true" in stored["trial.vllm.yaml"]
    assert "--api-key left out" in stored["trial.vllm.yaml"]
    assert not any(secret in text for text in stored.values())
    note = get_note_from_system_attrs(study._storage.get_study_system_attrs(study._study_id), frozen._trial_id)
    # the story names the limit it missed, with the figures
    assert note["body"] == ("**SLO miss p99_ttft_ms 140 > 100; 3 runtime recompiles (--allow-recompiles accepts "
                            "them)** (measured) (thr 812 tok/s, p99_ttft_ms 140.0, warmup 291 s)")
    assert frozen.user_attrs["p99_ttft_ms"] == 140.0 and frozen.user_attrs["recompiles"] == 3


def test_a_password_inside_a_flag_value_keeps_the_serve_config_out(tmp_path):
    pytest.importorskip("optuna_dashboard")
    trial_dir, result, backend = _trial_files(tmp_path, ["--download-dir", "https://u:hunter22@mirror/models"])
    _, trial = _ask(tmp_path)
    uploaded = TrialDashboard(tmp_path, backend).attach(trial, trial_dir, result,
                                                        TrialSettings(server={}, env={}, params={}))
    assert sorted(uploaded) == ["server.log", "trial.env"]
    assert not (trial_dir / "trial.vllm.yaml").exists()


def test_without_optuna_dashboard_trials_keep_their_figures_only(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna_dashboard", None)  # import optuna_dashboard -> ImportError
    trial_dir, result, backend = _trial_files(tmp_path, [])
    study, trial = _ask(tmp_path)
    dash = TrialDashboard(tmp_path, backend)
    assert dash.missing == MISSING and "pip install 'bucket-tuner[dashboard]'" in MISSING
    assert dash.attach(trial, trial_dir, result, TrialSettings(server={}, env={}, params={})) == []
    tell_result(study, trial, result, Objectives(), Constraints())
    dash.note(trial, result, Objectives(), Constraints())
    frozen = study.trials[0]
    assert frozen.user_attrs["output_throughput"] == 812.5
    assert not optuna.artifacts.get_all_artifact_meta(frozen, storage=study._storage)
    assert not (tmp_path / "artifacts").exists()
    assert not any("note" in k for k in study._storage.get_study_system_attrs(study._study_id))
