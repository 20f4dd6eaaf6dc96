"""Runtime graph compilations: the simulator prints the fork's per-step line when asked, the release
table says where the line exists, and an exported env file never carries these diagnostics."""

from __future__ import annotations

import optuna
import pytest

from tuner.buckets.runtime import DIAGNOSTIC_VARIABLES, diagnostic_env, supports_compile_log
from tuner.logparse import LogWatcher, StepGraphCompilation, parse_line
from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
from tuner.results.export import env_file_text
from tuner.sim import run_virtual

CAL = dict(sim=SimSettings(gpu_memory_utilization=0.5), inputs=ServerInputs(128, 4, 2048, 4096))
BASE_ENV = {"VLLM_GRAPH_RESERVED_MEM": "0.4", "VLLM_SKIP_WARMUP": "true"}  # every shape compiles at first use


def compile_lines(profile: str, env: dict) -> tuple[list[str], list[str]]:
    pred = predict_startup(profile, CAL["sim"], CAL["inputs"], {**BASE_ENV, **env})
    assert pred.failure is None
    run = run_virtual(pred, [(0.0, 300, 3), (1.0, 300, 3)])
    return ([m for _, _, key, m in run.logs if key == "step_compile"],
            [m for _, _, key, m in run.logs if key == "not_warmed"])


def test_simulator_prints_the_fork_line_per_compiling_step():
    lines, warned = compile_lines("fork-1.21.2", diagnostic_env("fork-1.21.2"))
    assert len(warned) == 2 and len(lines) == 2  # the prompt step and the first decode step
    events = [parse_line(f"WARNING 11-24 03:01:35 [hpu_worker.py:246] {m}") for m in lines]
    assert all(isinstance(e, StepGraphCompilation) for e in events)
    assert [(e.compilations, e.is_prompt, e.num_seqs) for e in events] == [(1, True, 1), (1, False, 1)]
    assert events[0].max_context_len == 300 and events[0].max_num_blocks == 3


def test_no_line_without_the_variable_or_on_vllm_gaudi():
    assert compile_lines("fork-1.21.2", {})[0] == []
    assert compile_lines("fork-1.21.2", {"VLLM_HPU_LOG_STEP_GRAPH_COMPILATION": "0"})[0] == []
    lines, warned = compile_lines("gaudi-0.15.1", {"VLLM_HPU_LOG_STEP_GRAPH_COMPILATION": "1"})
    assert lines == [] and warned  # it compiled, but vllm-gaudi does not log per step


def test_release_table():
    assert supports_compile_log("fork-1.17") and supports_compile_log("fork-main")
    assert not supports_compile_log("gaudi-0.26.0")
    assert diagnostic_env("fork-1.22") == {"VLLM_HPU_LOG_STEP_GRAPH_COMPILATION": "1", "PT_HPU_METRICS_GC_DETAILS": "1"}
    assert diagnostic_env("gaudi-main") == {} and diagnostic_env(None) == {}
    with pytest.raises(ValueError, match="fork-9.99"):
        diagnostic_env("fork-9.99")


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_exported_env_file_never_carries_diagnostics():
    study = optuna.create_study(directions=["maximize", "minimize", "minimize"])
    study.set_metric_names(["output_throughput", "p99_ttft_ms", "warmup_s"])
    trial = optuna.trial.create_trial(
        values=[100.0, 50.0, 60.0], params={}, distributions={},
        user_attrs={"server": {"max_model_len": 1024, "max_num_seqs": 8, "block_size": 128},
                    "env": {**diagnostic_env("fork-1.21.2"), "VLLM_HPU_LOG_STEP_GRAPH_COMPILATION_ALL": "1",
                            "VLLM_EXPONENTIAL_BUCKETING": "false"},
                    "observed": {"kv_blocks": 4111}})
    study.add_trial(trial)
    frozen = study.trials[0]
    for release in ("fork-1.21.2", None):
        text = env_file_text(study, frozen, "balanced", release,
                             extra={"PT_HPU_METRICS_GC_DETAILS": "1"})
        assert not any(name in text for name in DIAGNOSTIC_VARIABLES), text
        assert "VLLM_EXPONENTIAL_BUCKETING=false" in text


def test_watcher_counts_simulated_compilations_under_load():
    lines, _ = compile_lines("fork-1.21.2", diagnostic_env("fork-1.21.2"))
    w = LogWatcher()
    w.feed("INFO:     Application startup complete.", 0.0)
    for m in lines:
        w.feed(f"WARNING 11-24 03:01:35 [hpu_worker.py:246] {m}", 1.0)
    assert w.summary().compilations_under_load == 2
