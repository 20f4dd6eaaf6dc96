"""One trial against the simulator and its faults: every ending classified, metrics kept, nothing left.

The fault is switched through the server's environment (BUCKET_TUNER_SIM_FAULT), like any other
setting, so these runs go through exactly the code a real server goes through.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from tuner.load.workload import FixedWorkload
from tuner.perfmodel import target as M
from tuner.serve.backends import Backend
from tuner.space.schema import TrialSettings
from tuner.trial import run as T
from tuner.vocabulary.status import TrialStatus

from ..study.test_study_e2e import sim_processes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

SERVER = {"max_num_seqs": 8, "max_model_len": 1024, "block_size": 128, "max_num_batched_tokens": 2048}
ENV = {"VLLM_EXPONENTIAL_BUCKETING": "false"}


def context(tmp_path: Path, *, prediction=True, warmup_budget=None, warmup_timeout=7200.0, boot_timeout=900.0,
            num_prompts=12, request_timeout=600.0) -> T.TrialContext:
    return T.TrialContext(
        backend=Backend(kind="sim", model="llama", sim_release="fork-1.21.2", time_scale=0.2,
                        startup_time_scale=0.002),
        workload=FixedWorkload(160, 16, num_prompts=num_prompts),
        release="fork-1.21.2",
        device_model=M.DeviceModel() if prediction else None,
        load=T.LoadOptions(max_concurrency=4, warmup_requests=2, request_timeout_s=request_timeout),
        limits=T.Limits(boot_timeout_s=boot_timeout, warmup_timeout_s=warmup_timeout, warmup_budget_s=warmup_budget,
                        stop_grace_s=2.0, wall_slack_s=3.0),
        records_dir=tmp_path / "run",
    )


def assert_nothing_left(result: T.TrialResult, tmp_path: Path):
    if "--port" in result.argv:  # booted: no simulator on its port may survive the trial
        port = result.argv[result.argv.index("--port") + 1]
        left = {pid: cmd for pid, cmd in sim_processes().items() if f"--port {port} " in cmd + " "}
        assert not left, f"processes left behind: {left}"
    assert not list((tmp_path / "run").glob("*.json")), "a server record was left behind"


def run(tmp_path, ctx, env=None, server=None, stop_event=None):
    settings = TrialSettings(server=dict(server or SERVER), env={**ENV, **(env or {})}, params={})
    result = T.run_trial(ctx, settings, tmp_path / "trial", stop_event=stop_event)
    assert_nothing_left(result, tmp_path)
    return result


def fault(name: str) -> dict:
    return {"BUCKET_TUNER_SIM_FAULT": name}


def test_ok_trial_measures_and_matches_prediction(tmp_path):
    r = run(tmp_path, context(tmp_path))
    assert r.status == TrialStatus.OK, r.reason
    assert r.metrics["completed"] == 12 and r.metrics["failed"] == 0
    assert r.metrics["total_output_tokens"] == 12 * 16
    assert r.predicted["prompt_buckets"] == r.observed["prompt_buckets"]
    assert r.predicted["kv_blocks"] == r.observed["kv_blocks"]
    # Warmup from the server's own line, in its (simulated) time; predicted within a second.
    assert r.observed["warmup_source"] == "log: Warmup finished"
    assert abs(r.observed["warmup_s"] - r.predicted["warmup_s"]) <= 1.0
    bench = json.loads(Path(r.artifacts["bench_json"]).read_text())
    assert bench["tuner_time_scale"] == 0.2
    stop = r.observed["stop"]
    assert stop["leftover"] == [] and stop["ended_by"] == "SIGINT" and stop["exit_code"] == 0, stop


def test_invalid_settings_are_rejected_before_boot(tmp_path):
    r = run(tmp_path, context(tmp_path), env={"VLLM_DECODE_BS_BUCKET_MIN": "32"})  # > max_num_seqs
    assert r.status == TrialStatus.INVALID_CONFIG and not r.booted
    assert "VLLM_DECODE_BS_BUCKET" in r.reason
    assert not (tmp_path / "trial" / "server.log").exists()


def test_predicted_warmup_over_budget_costs_no_boot(tmp_path):
    r = run(tmp_path, context(tmp_path, warmup_budget=5.0))
    assert r.status == TrialStatus.WARMUP_OVER_BUDGET and not r.booted
    assert "exceeds the budget of 5 s" in r.reason


def test_warmup_over_budget_is_aborted_while_it_runs(tmp_path):
    # Without prediction the budget can only be enforced from the live warmup projection.
    ctx = context(tmp_path, prediction=False, warmup_budget=20.0)
    ctx.backend.startup_time_scale = 0.01
    r = run(tmp_path, ctx)
    assert r.status == TrialStatus.WARMUP_OVER_BUDGET and r.booted
    assert "projected warmup" in r.reason


@pytest.mark.parametrize("name,status,needle", [
    ("oom-warmup", TrialStatus.WARMUP_OOM, "out of memory"),
    ("crash-warmup", TrialStatus.CRASH, "during warmup"),
])
def test_warmup_failures(tmp_path, name, status, needle):
    r = run(tmp_path, context(tmp_path), env=fault(name))
    assert r.status == status, r.reason
    assert needle in r.reason
    assert (tmp_path / "trial" / "server.log").exists()


def test_hung_warmup_times_out_and_is_killed(tmp_path):
    # hang-warmup ignores SIGINT: the stop must escalate.
    r = run(tmp_path, context(tmp_path, warmup_timeout=300.0), env=fault("hang-warmup"))
    assert r.status == TrialStatus.WARMUP_TIMEOUT
    stop = r.observed["stop"]
    assert stop["ended_by"] in ("SIGTERM", "SIGKILL") and stop["exit_code"] in (-15, -9), stop


def test_server_that_never_becomes_ready(tmp_path):
    ctx = context(tmp_path, boot_timeout=1.0)
    ctx.backend.startup_time_scale = 0.05
    r = run(tmp_path, ctx, env=fault("slow-start:factor=200"))
    assert r.status == TrialStatus.BOOT_TIMEOUT


@pytest.mark.parametrize("name", ["http-500:every=3", "malformed-sse:every=4", "stall-stream:every=5,after=2"])
def test_request_faults_are_load_errors_with_metrics_kept(tmp_path, name):
    ctx = context(tmp_path, request_timeout=10.0)
    r = run(tmp_path, ctx, env=fault(name))
    assert r.status == TrialStatus.LOAD_ERRORS, r.reason
    assert 0 < r.metrics["failed"] < 12
    assert r.metrics["completed"] == 12 - r.metrics["failed"]
    assert r.metrics["output_throughput"] > 0  # measured on the requests that succeeded
    # one fault, one group: completion ids and offsets do not split it ("3 x ValueError: ... cmpl-<id>")
    assert f"requests failed: {r.metrics['failed']} x " in r.reason and "more distinct" not in r.reason, r.reason


def test_crash_under_load(tmp_path):
    r = run(tmp_path, context(tmp_path, num_prompts=60), env=fault("crash-load:after=10"))
    assert r.status == TrialStatus.CRASH, r.reason


def test_interrupt_stops_the_trial_cleanly(tmp_path):
    ctx = context(tmp_path)
    ctx.backend.startup_time_scale = 0.05  # a few seconds of warmup to interrupt
    stop = threading.Event()
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    r = run(tmp_path, ctx, stop_event=stop)
    timer.cancel()
    assert r.status == TrialStatus.INTERRUPTED


def test_runtime_compilations_are_counted_from_the_forks_compile_log(tmp_path):
    """Prompts longer than the largest warmed prompt bucket compile while serving: the trial sets the
    fork's per-step compilation log (diagnostics only) and counts what it prints."""
    ctx = context(tmp_path)
    ctx.workload = FixedWorkload(700, 8, num_prompts=6)
    result = run(tmp_path, ctx, env={"VLLM_PROMPT_SEQ_BUCKET_MAX": "512"})
    log = (tmp_path / "trial" / "server.log").read_text()
    assert result.status == TrialStatus.OK, result.reason
    assert "VLLM_HPU_STEP_GRAPH_COMPILATION" in log
    assert result.observed["compile_steps_under_load"] > 0 and result.observed["not_warmed_up"] > 0
    from tuner.buckets.runtime import diagnostic_env

    env = T.server_environment(TrialSettings({}, {}, {}), T.Slot(), ctx.backend, ctx.release)
    assert diagnostic_env("fork-1.21.2").items() <= env.items() and diagnostic_env("fork-1.21.2")
    assert not diagnostic_env("gaudi-main")  # the plugin has no such log


def test_a_context_past_the_models_is_rejected_before_boot_with_vllms_reason(tmp_path):
    r = run(tmp_path, context(tmp_path), server={**SERVER, "max_model_len": 262144,
                                                  "max_num_batched_tokens": 262144})
    assert r.status == TrialStatus.INVALID_CONFIG and not r.booted
    assert "max_model_len (262144) is greater than the derived max_model_len" in r.reason


def test_a_context_extended_by_hf_overrides_is_judged_on_the_model_as_overridden(tmp_path):
    # the model is read with the server's --hf-overrides, as vLLM reads it: a longer max_position_embeddings
    # admits the length, and a length past the overridden one is still refused before a boot
    from dataclasses import replace

    from tuner.models.overrides import canonical

    def check(ctx, length):
        return T.pre_boot_check(ctx, TrialSettings(server={**SERVER, "max_model_len": length,
                                                           "max_num_batched_tokens": length},
                                                   env=dict(ENV), params={}))[1]

    ctx = context(tmp_path)
    assert check(ctx, 262144) is not None
    extended = replace(ctx, device_model=replace(ctx.device_model, hf_overrides=canonical(
        '{"max_position_embeddings": 262144}')))
    assert check(extended, 262144) is None
    refused = check(extended, 262145)
    assert refused is not None and "(max_position_embeddings=262144" in refused.reason
