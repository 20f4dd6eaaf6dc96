"""A log of a past boot calibrates the model before the first trial (`tune --calibrate-from`).

The log comes from a simulated node whose hardware differs from the documented constants in ways the
tuner is not told (warm-up x2, KV block bytes +10%); the study's prediction of the same configuration
must then land within 10% of what that node really does, where the uncalibrated model is far off."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from tuner.load.workload import FixedWorkload
from tuner.perfmodel import Corrections, ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.calibration import Calibration
from tuner.perfmodel.target import DeviceModel, ModelTarget, predict
from tuner.sim.startup import run_startup_virtual
from tuner.study.logcalibration import LogCalibrationError, log_sample, settings_from_log

from ..conftest import ROOT

SERVER = {"max_model_len": 4096, "block_size": 128, "max_num_batched_tokens": 8192}
TRUTH = Corrections(prompt_warmup=2.0, decode_warmup=2.0, capture=2.0, kv_block=1.1)


def _ctx(release: str) -> ModelTarget:
    return ModelTarget(workload=FixedWorkload(128, 16, num_prompts=2), release=release,
                        device_model=DeviceModel("gaudi2", "llama-3.1-8b", "bf16"))


def _node_log(release: str, env: dict, max_num_seqs: int = 64):
    sim = SimSettings(model="llama-3.1-8b", device="gaudi2", dtype="bf16", gpu_memory_utilization=0.9)
    inputs = ServerInputs(block_size=128, max_num_seqs=max_num_seqs, max_model_len=4096, max_num_batched_tokens=8192)
    truth = predict_startup(release, sim, inputs, env, corrections=TRUTH)
    run = run_startup_virtual(truth)
    return truth, [part for line in run.lines for part in line.split("\n")]


@pytest.mark.parametrize("release,env", [
    ("fork-1.21.2", {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_GRAPH_RESERVED_MEM": "0.1",
                     "VLLM_DECODE_BS_BUCKET_STEP": "16", "VLLM_DECODE_BS_BUCKET_MAX": "64"}),
    ("fork-1.22", {}),
    ("gaudi-main", {}),
])
def test_a_log_of_the_same_configuration_predicts_it_within_ten_percent(release, env):
    truth, lines = _node_log(release, env)
    ctx = _ctx(release)
    got = log_sample(lines, ctx, SERVER, source="node.log")
    prior = predict(ctx, got.settings)
    calibrated = predict(ctx, got.settings, Calibration.from_samples([got.sample]).corrections)
    print(f"\n{release}: truth warmup {truth.warmup_seconds:.0f} s, {truth.num_blocks} blocks; prior "
          f"{prior.warmup_seconds:.0f} s, {prior.num_blocks}; calibrated {calibrated.warmup_seconds:.0f} s, "
          f"{calibrated.num_blocks}; buckets {len(truth.plan.decode)} / {len(calibrated.plan.decode)}")
    assert calibrated.warmup_seconds == pytest.approx(truth.warmup_seconds, rel=0.10)
    assert calibrated.num_blocks == pytest.approx(truth.num_blocks, rel=0.10)
    # without the log the model is far off on the warm-up (x2 hardware)
    assert abs(prior.warmup_seconds - truth.warmup_seconds) > 0.3 * truth.warmup_seconds


def test_settings_are_read_from_the_log():
    _, lines = _node_log("fork-1.21.2", {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_GRAPH_RESERVED_MEM": "0.25"},
                         max_num_seqs=32)
    from tuner.explain import explain

    settings, _ = settings_from_log(explain(lines), SERVER, "fork-1.21.2")
    assert settings.server["max_num_seqs"] == 32 and settings.server["gpu_memory_utilization"] == 0.9
    assert settings.env["VLLM_GRAPH_RESERVED_MEM"] == "0.25"


def test_a_log_of_another_release_is_refused_by_name():
    _, lines = _node_log("gaudi-main", {})
    with pytest.raises(LogCalibrationError, match="node.log.*fork-1.21.2"):
        log_sample(lines, _ctx("fork-1.21.2"), SERVER, source="node.log")


def test_tune_calibrate_from_end_to_end(tmp_path):
    """The command line: a log written by the simulated node itself, then a 1-trial study on that node."""
    space = tmp_path / "space.yaml"
    space.write_text("name: cal\nrelease: fork-1.22\nserver: {max_model_len: 2048, block_size: 128, "
                     "max_num_batched_tokens: 4096}\nparameters:\n  max_num_seqs: {type: categorical, choices: [16]}\n")
    from tuner.serve.ports import find_free_port

    sim = [sys.executable, "-m", "tuner.sim", "meta-llama/Llama-3.1-8B-Instruct", "--release", "fork-1.22",
           "--max-num-seqs", "16", "--max-model-len", "2048", "--max-num-batched-tokens", "4096",
           "--sim-hardware", "prompt_warmup=2", "decode_warmup=2", "kv_block=1.1",
           "--sim-startup-time-scale", "0.002", "--host", "127.0.0.1", "--port", str(find_free_port())]
    log = tmp_path / "node.log"
    with open(log, "w") as out:
        node = subprocess.Popen(sim, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while "Warmup finished" not in log.read_text() and node.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            os.killpg(node.pid, signal.SIGTERM)
            node.wait(30)
    assert "Warmup finished" in log.read_text(), log.read_text()[-2000:]
    run = subprocess.run([sys.executable, "-m", "tuner.cli", "tune", "--space", str(space), "--results",
                          str(tmp_path / "r"), "--n-trials", "1", "--calibrate-from", str(log), "--no-report",
                          "--max-concurrency", "4", "--num-prompts", "8", "--random-input-len", "64",
                          "--random-output-len", "8", "--server-args",
                          "--sim-hardware prompt_warmup=2 decode_warmup=2 kv_block=1.1"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "calibrate-from" in run.stderr
    import optuna

    study = optuna.load_study(study_name="cal", storage=f"sqlite:///{tmp_path / 'r' / 'cal' / 'study.db'}")
    trial = study.trials[0]
    predicted, observed = trial.user_attrs["predicted"], trial.user_attrs["observed"]
    print(json.dumps({"predicted": predicted, "observed": observed}, default=str)[:600])
    assert predicted["warmup_s"] == pytest.approx(observed["warmup_s"], rel=0.10)
    assert predicted["kv_blocks"] == pytest.approx(observed["kv_blocks"], rel=0.10)


def test_a_log_without_bucket_lines_still_calibrates_memory_and_the_total():
    _, lines = _node_log("fork-1.22", {})
    cut = [x for x in lines if "Generated" not in x and "bucket config" not in x and "[Warmup]" not in x]
    # The study runs the node's settings (max_num_seqs 64): its rebuild has the 51 prompt and 91 decode
    # buckets the graph summaries count, so the server's total is of the configuration it is compared with.
    got = log_sample(cut, _ctx("fork-1.22"), {**SERVER, "max_num_seqs": 64}, source="cut.log")
    assert got.factor("kv_block") == pytest.approx(math.log(1.1), abs=0.005)  # the node's KV blocks are +10%
    # Slower node, from the server's total: one observation over both phases, weighted by their seconds.
    total = [o for o in got.observations if {"prompt_warmup", "decode_warmup"} <= set(o.weights)]
    assert len(total) == 1 and total[0].value == pytest.approx(math.log(2.0), abs=0.05)
    assert sum(total[0].weights.values()) == pytest.approx(1.0)
    assert any("Warmup finished" in n and "no timed line covers" in n for n in got.notes)
    cal = got.calibration()
    assert cal.corrections.prompt_warmup > 1.5 and cal.corrections.decode_warmup > 1.5


def test_the_total_of_another_configuration_is_not_used():
    """The study's server defaults build 117 decode buckets where the log's graph summaries count 91:
    the server's total times another configuration than the one predicted, so it is said and left out."""
    _, lines = _node_log("fork-1.22", {})
    cut = [x for x in lines if "Generated" not in x and "bucket config" not in x and "[Warmup]" not in x]
    got = log_sample(cut, _ctx("fork-1.22"), SERVER, source="cut.log")
    assert not [o for o in got.observations if set(o.weights) & {"prompt_warmup", "decode_warmup", "capture"}]
    assert any("'decode': 91" in n and "not used" in n for n in got.notes)
    assert got.factor("kv_block") == pytest.approx(math.log(1.1), abs=0.005)  # memory still counts
