"""What a current vllm-gaudi build (main, on vLLM 0.32) prints, read right: a log composed from the plugin's and
vLLM's own format strings, with the bucket lists its bucketing code produces (tests/data/log-samples/composed/).

Each assertion is a fact of that log that explain misread before: the default token budget of the scheduler's
line (the rebuild took 8192 from the buckets and built 23 prompt buckets where the log has 72), vLLM's loader
timing the model's construction and its weights apart (1.3 s shown of a 43 s load), the stats line's
preemptions before the KV usage (v1's only word of them), the tqdm bars that are all a default build prints of
its warm-up (said to be missing lines), the fallback every tensor-parallel rank prints (counted twice), and the
KV cache in tokens and requests (read, never shown)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.cli import main

LOG = Path(__file__).parents[1] / "data" / "log-samples" / "composed" / "vllm-gaudi-main_qwen3-30b-a3b_tp2.log"


def _explain(capsys, *argv) -> str:
    assert main(["explain", str(LOG), *argv]) == 0
    return capsys.readouterr().out


def test_the_logged_budget_rebuilds_the_logged_buckets(capsys):
    d = json.loads(_explain(capsys, "--json"))
    assert d["server"]["max_num_batched_tokens"] == d["advice"]["server"]["max_num_batched_tokens"] == 2048
    text = _explain(capsys)
    logged = next(line for line in text.splitlines() if line.strip().startswith("as logged"))
    assert logged.split()[3:5] == ["72", "58"]                       # the log's own lists, rebuilt
    assert "builds other buckets than" not in text and "max_num_batched_tokens=8192" not in text


def test_a_log_without_the_budget_line_infers_it_from_chunked_prompt_buckets(tmp_path, capsys):
    cut = tmp_path / "no-budget.log"
    cut.write_text("".join(line for line in LOG.read_text().splitlines(keepends=True)
                           if "Chunked prefill is enabled" not in line))
    assert main(["explain", str(cut)]) == 0
    text = capsys.readouterr().out
    assert "max_num_batched_tokens=2048 (the largest batch x length" in text.replace("\n  ", " ")
    logged = next(line for line in text.splitlines() if line.strip().startswith("as logged"))
    assert logged.split()[3:5] == ["72", "58"]


def test_load_preemptions_bars_fallbacks_and_kv_tokens(capsys):
    d = json.loads(_explain(capsys, "--json"))
    load = next(p for p in d["warmup"]["phases"] if p["name"] == "load weights")
    assert load["seconds"] == pytest.approx(1.284519 + 41.37)          # built, then its weights loaded
    assert d["runtime"]["preemptions"] == 4
    assert d["runtime"]["prefix_cache_hit_pct"] == 11.9    # the last stats line's (read, never shown before)
    assert d["runtime"]["buckets_not_prepared"] == [{"phase": "prompt", "requested": [1, 1024, 55],
                                                     "new_bucket": [1, 1056, 64]}]  # once, not once per rank
    bars = [iv for iv in d["warmup"]["intervals"] if iv["kind"] == "bar"]
    assert [iv["steps"] for iv in bars] == [{"prompt": 72}, {"decode": 58}]
    assert not any(iv["kind"] == "gap" for iv in d["warmup"]["intervals"])
    m = d["memory_bytes"]
    assert (m["kv_blocks"], m["kv_tokens"], m["max_concurrency"], m["concurrency_for"]) == (13134, 1_681_152, 205.22,
                                                                                           8192)
    text = _explain(capsys)
    assert "missing" not in text and "elided" not in text
    assert "4 request(s) were preempted" in text
    assert "1,681,152 tokens: 205.22 requests of 8,192 tokens at once" in text.replace("\n  ", " ")


# vllm-gaudi main's other warm-ups and runtime lines, one line each from its format strings (file:line at 091bbadd)
POOLING_RUN = """\
(EngineCore_DP0 pid=90) INFO 08-21 10:00:59 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: \
model='BAAI/bge-m3', tensor_parallel_size=1, dtype=torch.bfloat16, max_seq_len=8192
(EngineCore_DP0 pid=90) WARNING 08-21 10:01:12 [common.py:138] VLLM_EXPONENTIAL_BUCKETING is deprecated and will be \
removed in a future release. Use VLLM_BUCKETING_STRATEGY='exp'|'lin'|'pad' instead.
(EngineCore_DP0 pid=90) WARNING 08-21 10:01:12 [common.py:147] Overriding bucketing strategy \
ExponentialBucketingStrategy with LinearBucketingStrategy due to VLLM_EXPONENTIAL_BUCKETING=false
(EngineCore_DP0 pid=90) INFO 08-21 10:01:12 [hpu_model_runner.py:5243] Starting pooler warmup with prompt buckets: \
[(1, 128, 0), (1, 256, 0), (1, 512, 0)]
(EngineCore_DP0 pid=90) INFO 08-21 10:01:12 [hpu_model_runner.py:5255] Warmup: bs=1, query_len=512, num_blocks=0, \
total_tokens=512
(EngineCore_DP0 pid=90) INFO 08-21 10:01:20 [hpu_model_runner.py:5341] Pooler warmup completed successfully
(EngineCore_DP0 pid=90) INFO 08-21 10:01:20 [defragmentation.py:238] Warming up defragmenter with thresholds: \
[8, 16, 32, 64, 128, 256, 512]
(EngineCore_DP0 pid=90) INFO 08-21 10:01:23 [defragmentation.py:249] Defragmenter warmup completed successfully
(EngineCore_DP0 pid=90) INFO 08-21 10:01:24 [hpu_model_runner.py:6308] Warmup finished in 12 secs, allocated 1.5 GiB \
of device memory
(APIServer pid=80) INFO 08-21 10:01:30 [api_server.py:1] Starting vLLM server on http://0.0.0.0:8000
(EngineCore_DP0 pid=90) WARNING 08-21 10:07:03 [hpu_worker.py:763] [HPUWorker.execute_model] graph compilation \
detected: [('TotalNumberOfGraphCompilations', 2), ('TotalGraphCompilationTime', 412.6)]
"""


def test_pooler_and_defragmenter_warmups_are_phases_and_serving_compiles_are_counted(tmp_path, capsys):
    log = tmp_path / "pooling.log"
    log.write_text(POOLING_RUN)
    assert main(["explain", str(log), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    phases = {p["name"]: p["seconds"] for p in d["warmup"]["phases"]}
    assert phases == {"pooler warmup": 8, "defragmenter warmup": 3}
    assert d["reading"]["unread"] == 0
    assert d["runtime"]["graphs_compiled_while_serving"] == 2
    assert main(["explain", str(LOG), "--json"]) == 0
    main_phases = [p["name"] for p in json.loads(capsys.readouterr().out)["warmup"]["phases"]]
    assert main_phases == ["load weights", "sampler warmup", "prompt warmup", "decode warmup"]  # in the order run


def test_developer_mode_step_lines_keep_the_bars_phase_times(capsys):
    """VLLM_DEVELOPER_MODE adds a bare line per step (no timestamp) inside each bar: the bars still time the
    phases, as without them (130 untimed rows and no prompt or decode phase before)."""
    assert main(["explain", str(LOG.with_name(LOG.stem + "_devmode.log")), "--json"]) == 0
    dev = json.loads(capsys.readouterr().out)
    plain = json.loads(_explain(capsys, "--json"))

    def phases(d):
        return [(p["name"], p["seconds"], p.get("steps")) for p in d["warmup"]["phases"]]

    assert phases(dev) == phases(plain)
    assert ("prompt warmup", 192.0, 72) in phases(dev) and ("decode warmup", 106.0, 58) in phases(dev)
    assert [iv["kind"] for iv in dev["warmup"]["intervals"]] == ["bar", "bar"]
    assert dev["reading"]["unread"] == 0


def test_an_oom_during_warm_up_is_one_failure_named_with_its_step(capsys):
    """A worker's device OOM, re-raised by the engine core and the API server, was 5 errors (the traceback and
    the OOM reading of each line, and each re-raise) and a summary saying only that the log ends."""
    oom = LOG.with_name(LOG.stem + "_oom_warmup.log")
    assert main(["explain", str(oom), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [(e["kind"], e["line"]) for e in d["errors"]] == [("oom", 159)]
    assert d["errors"][0]["restated_at"] == [164, 168]
    assert "PT_DEVMEM Allocation failed" in d["errors"][0]["message"]
    assert main(["explain", str(oom)]) == 0
    text = capsys.readouterr().out.replace("\n  ", " ")
    assert "Warm-up failed during decode 22/58 (72 prompt and 58 decode buckets generated): device out of memory" \
        in text
    assert "1 error(s), first at line 159 (restated at lines 164, 168)" in text
    assert "raise VLLM_GRAPH_RESERVED_MEM (now 0.1" in text and "--gpu-memory-utilization (now 0.9)" in text
    assert "The log ends before warm-up finished" not in text


def test_an_unused_graph_reserve_is_handed_to_the_kv_cache(capsys):
    """The warm-up's graphs used 3.62 of the 8.55 GiB reserved (VLLM_GRAPH_RESERVED_MEM=0.1 of 85.52 GiB usable):
    0.06 keeps them and a quarter more, and gives the KV cache 0.04 x 85.52 GiB, at the log's 6 MiB a block."""
    d = json.loads(_explain(capsys, "--json"))
    hint = d["advice"]["graph_reserve"]
    assert hint["suggested"] == 0.06 and hint["fraction"] == 0.1
    usable = hint["reserved"] / 0.1
    assert hint["freed"] == int(0.04 * usable)
    per_block = d["memory_bytes"]["kv_cache"] / d["memory_bytes"]["kv_blocks"]
    assert hint["extra_blocks"] == int(hint["freed"] // per_block) == 583
    # a warm-up that never finished has not used its reserve yet: no advice
    oom = LOG.with_name(LOG.stem + "_oom_warmup.log")
    assert main(["explain", str(oom), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["advice"]["graph_reserve"] is None


def test_no_smaller_reserve_for_a_warm_up_that_captured_part_of_its_graphs():
    """fork <= 1.21 stops capturing a phase when its share of the reserve runs out (`captured:15 (62.5%)`): a
    smaller reserve would capture fewer graphs, whatever the total used."""
    from tuner.explain.analysis import MemoryView, reserve_hint

    m = MemoryView(graph_reserved=8 * 2**30, graph_reserved_fraction=0.1, graphs_used=2**30, kv_cache=70 * 2**30,
                   kv_blocks=1000)
    assert reserve_hint(m, True).suggested == 0.02
    assert reserve_hint(m, True, every_graph_captured=False) is None
    assert reserve_hint(m, False) is None
