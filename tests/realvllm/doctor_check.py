"""`bucket-tuner doctor` on the genuine vLLM (CPU 0.32.0): its /metrics are vLLM's own, so the doctor's
names are checked against the real thing. It runs on the shared server of tests/realvllm/test_realvllm.py
(TestOneServer calls it before its clean-stop test), while `bench` keeps requests in flight: no extra
server start. What the load shows depends on this machine's speed; only what it cannot change is asserted."""

from __future__ import annotations

import json
import subprocess


def doctor_reads_vllms_own_metrics(s, tmp_path):
    from tuner.explain.doctor import LIMITS

    from .test_realvllm import SERVED, VOCAB, bucket_tuner

    bench = subprocess.Popen(
        [*bucket_tuner(), "bench", "--base-url", s.base_url, "--model", SERVED, "--dataset-name", "fixed",
         "--random-input-len", "64", "--random-output-len", "32", "--num-prompts", "16", "--max-concurrency", "8",
         "--vocab-size", str(VOCAB), "--result-file", str(tmp_path / "bench.json"), "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        proc = subprocess.run([*bucket_tuner(), "doctor", "--url", s.base_url, "--window", "3", "--interval", "0.5",
                               "--log", str(s.log_path), "--json"], capture_output=True, text=True, timeout=120)
    finally:
        _, err = bench.communicate(timeout=300)
    assert bench.returncode == 0, err[-2000:]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    d = json.loads(proc.stdout)
    assert d["samples"] >= 6 and d["limit"] in LIMITS
    figures = d["figures"]
    # vLLM's own gauges and counters were found under the names the doctor reads
    assert figures["kv_usage"] is not None and 0 <= figures["kv_usage"] <= 1
    assert figures["preemptions"] is not None and figures["prompt_tokens_per_s"] is not None
    assert figures["generation_tokens_per_s"] is not None and figures["requests_per_s"] is not None
    # the KV blocks: vLLM's cache_config_info, or its start-up log
    assert d["settings"]["kv_blocks"] and d["settings"]["source"]["kv_blocks"] in ("/metrics", "the log")
    assert all(f["remedy"].startswith(("bucket-tuner tune ", "bucket-tuner plan ")) for f in d["findings"])
    return d
