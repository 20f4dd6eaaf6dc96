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
