"""`bucket-tuner bench` against the simulator: vllm bench serve's flags, stdout labels and JSON fields."""

from __future__ import annotations

import json
import sys

import pytest

from tuner.cli import main
from tuner.server import ServerProcess, find_free_port

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


@pytest.fixture
def sim_server(tmp_path):
    port = find_free_port()
    argv = [sys.executable, "-m", "tuner.sim", "llama", "--sim-model", "llama-3.1-8b", "--host", "127.0.0.1", "--port", str(port),
            "--sim-release", "gaudi-main", "--max-num-seqs", "16", "--max-model-len", "1024",
            "--sim-time-scale", "0.2", "--sim-startup-time-scale", "0.002"]
    with ServerProcess(records_dir=tmp_path / "run") as srv:
        srv.start(argv, {"PATH": "/usr/bin:/bin"}, tmp_path / "server.log", port=port)
        outcome = srv.wait_ready(f"http://127.0.0.1:{port}", boot_timeout_s=30, warmup_timeout_s=30)
        assert outcome.ok, outcome.reason
        yield f"http://127.0.0.1:{port}"
    assert srv.stop_report.clean


def test_bench_prints_vllm_labels_and_writes_vllm_json(sim_server, tmp_path, capsys):
    out_file = tmp_path / "res" / "bench.json"
    code = main(["bench", "--base-url", sim_server, "--model", "llama", "--num-prompts", "20",
                 "--random-input-len", "300", "--random-output-len", "20", "--random-range-ratio", "0.5",
                 "--max-concurrency", "4", "--goodput", "ttft:100000", "tpot:100000", "--num-warmups", "2",
                 "--time-scale", "0.2", "--quiet", "--result-file", str(out_file),
                 "--percentile-metrics", "ttft,tpot,itl,e2el"])
    out = capsys.readouterr().out
    assert code == 0
    for label in ("Successful requests:", "Request throughput (req/s):", "Output token throughput (tok/s):",
                  "Mean TTFT (ms):", "P99 TPOT (ms):", "Request goodput (req/s):"):
        assert label in out
    data = json.loads(out_file.read_text())
    assert data["completed"] == 20 and data["failed"] == 0
    # Exact output lengths: the usage counts equal what each request asked for.
    assert sum(data["output_lens"]) == data["total_output_tokens"]
    lo, hi = data["tuner_workload"]["output_len_bounds"]
    assert lo == 10 and hi == 30 and all(lo <= n <= hi for n in data["output_lens"])
    assert data["tuner_workload"]["range_ratio_convention"].startswith("vllm-range-ratio")
    # Every SLO generous: every request is good.
    assert data["request_goodput"] == pytest.approx(data["request_throughput"])
    for key in ("mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "std_e2el_ms", "max_concurrent_requests"):
        assert key in data
    assert data["max_concurrent_requests"] <= 4


@pytest.mark.parametrize("args,needle", [
    (["--random-range-ratio", "1.0"], "range_ratio"),
    (["--goodput", "ttft=5"], "--goodput expects NAME:NUMBER"),
    (["--metric-percentiles", "99,abc"], "--metric-percentiles"),
    (["--dataset-name", "trace"], "--dataset-path"),
    (["--num-prompts", "0"], "--num-prompts"),
])
def test_bad_bench_flags_name_the_value(args, needle, capsys):
    code = main(["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", *args])
    assert code == 2
    assert needle in capsys.readouterr().err
