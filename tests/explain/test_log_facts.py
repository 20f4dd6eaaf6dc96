"""`explain` on every real log against the facts read off it by hand (tests/data/log-samples/facts.yaml),
and the misreadings of issue 23 one by one: the release chosen from the log's evidence, figures that
never span elided lines or two starts, cut bucket lists, the engine's rebuild checked against the log,
skip_warmup, numbers never cut in the text, and --model-shape with the log's TP and generic shapes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tuner.explain import explain
from tuner.explain.render import WIDTH, render_text, to_json

from ..conftest import LOG_SAMPLES, ROOT

FACTS = {f["file"]: f for f in yaml.safe_load((LOG_SAMPLES / "facts.yaml").read_text())}
LOGS = sorted(str(p.relative_to(LOG_SAMPLES)) for p in LOG_SAMPLES.rglob("*.log"))
F117 = "fork-v0.5.3-gaudi-1.17_readme_startup.log"
F122 = "fork-v0.9.0.1-gaudi-1.22_readme_exponential.log"
PR345_CUT = "real/fork-1.18_pr345_buckets_cut.log"


def _lines(name: str) -> list[str]:
    return [x for x in (LOG_SAMPLES / name).read_text().splitlines() if not x.startswith("# SOURCE")]


def _cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "tuner.cli", "explain", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


def _figures(phases) -> list[dict]:
    return [{"phase": p.name.removesuffix(" warmup"), "seconds": p.seconds, "steps": p.steps, "of": p.total,
             "spans_gap": p.gap} for p in phases if p.steps is not None]


def test_every_log_has_hand_read_facts():
    assert sorted(FACTS) == LOGS


@pytest.mark.parametrize("name", LOGS)
def test_explain_reads_every_log_as_a_person_does(name):
    facts = FACTS[name]
    x = explain(_lines(name), source=name)
    render_text(x)
    json.dumps(to_json(x))                              # no internal error on any of them
    assert x.bucket_counts == facts["buckets"]
    assert x.timeline.warmup_total_s == facts["warmup_total_s"]
    assert x.memory.kv_blocks == facts["kv_blocks"]
    if facts["release"] is not None:
        assert facts["release"] in x.release.profiles, x.release
    assert _figures(x.timeline.phases) == facts["phases"]
    others = [_figures(r.phases) for r in x.timeline.other_runs]
    assert others == [s["phases"] for s in facts.get("other_starts", [])]
    slow = x.timeline.slowest
    assert (slow[0].seconds if slow else None) == facts.get("slowest_single_step_s")
    if x.server.device is not None:
        assert x.server.device == facts["device"]
    if x.server.tp_exact:
        assert x.server.tp == facts["tp"]


# --- the release is chosen from the log's evidence ---------------------------------------------------

def test_a_fork_122_graph_warmup_is_read_as_fork_122_not_fork_main():
    """fork-main defaults to PT_HPU_LAZY_MODE=0 (no HPU graphs): its model matches none of the log's
    [Warmup][Graph/..] steps. The log's graph warm-up says lazy mode, the fork-1.22 default."""
    x = explain(_lines(F122))
    assert set(x.release.profiles) == {"fork-1.22", "fork-1.23", "fork-main"}  # 1.23 builds the same text buckets
    assert x.release.profile == x.advice.profile == "fork-1.22"
    assert "lazy mode" in x.release.evidence[-1]
    first_start = [line for line in _lines(F122) if "19:27:37" not in line]   # one start only
    doc = json.loads(_cli("--json", "--model-shape", "llama-3.1-8b", "--device", "gaudi3", "-",
                          stdin="\n".join(first_start) + "\n").stdout)
    assert doc["advice"]["profile"] == "fork-1.22"
    assert doc["advice"]["predicted_by"].startswith("the performance model (gaudi3, llama-3.1-8b, bf16, TP 1)")
    assert not [n for n in doc["advice"]["notes"] if n.startswith("no model prediction")]


def test_fork_117_decode_warmup_over_seq_len_is_read_as_117():
    x = explain(_lines("enterprise-rag_readme_fork-1.16_enforce_eager.log"))
    assert x.release.profiles == ("fork-1.17",)


# --- figures never span elided lines or two starts ---------------------------------------------------

def test_the_28_s_gap_of_the_117_readme_is_no_step_time():
    x = explain(_lines(F117))
    assert max(s.seconds for s in x.timeline.slowest) == 1
    gap = next(iv for iv in x.timeline.intervals if iv.seconds == 28)
    assert not gap.exact and dict(gap.spans) == {"prompt": 24, "decode": 47}
    text = render_text(x)
    assert "28 s" not in "".join(line for line in text.splitlines() if "[" in line)   # not in the slowest list
    assert "prompt + decode warmup" in text and "72 steps, across elided lines" in text


def test_two_starts_in_one_log_are_never_added_together():
    x = explain(_lines(F117))
    assert len(x.reading.runs) == 2
    # the 08-01 start's 13 s of prompt warm-up is not added to the 08-02 start's figures
    assert "prompt warmup" not in [p.name for p in x.timeline.phases]
    assert [r.start for r in x.timeline.other_runs] == ["08-01 22:26:47"]
    assert sum(p.seconds for p in x.timeline.phases if p.steps) == 49      # 28 + 7 + 14: the server's own total
    x = explain(_lines(F122))        # bucket lines of a 19:27 start pasted inside the 19:15 start
    prompt = next(p for p in x.phases if p.phase == "prompt")
    assert prompt.ranges[0] == (1, 4) and prompt.config["seq"] == (128, 128, 4096, 13)   # the 19:15 start's
    logged = next(a for a in x.advice.alternatives if a.name == "as logged")
    assert (logged.prompt_buckets, logged.decode_buckets) == (36, 42) and x.advice.rebuild_mismatch is None


def test_the_text_says_how_the_warmup_lines_were_read_without_a_model():
    """Without --model-shape the reader still sees what calibration would read: excerpts left out,
    gaps kept as totals, the step the log ends in; with it, the same notes are not said twice."""
    from tuner.study.logcalibration import model_advice

    lines = _lines(F122)
    x = explain(lines)
    text = " ".join(render_text(x).split())
    assert "how the warm-up lines were read:" in text
    assert "32 steps in 59 s (lines left out)" in text and "the time goes back 12 min" in text
    assert to_json(x)["warmup"]["notes"] == x.timeline.notes
    model_advice(x, lines, "gaudi3", "llama-3.1-8b", "bf16", {"block_size": 128})
    assert not [n for n in x.advice.notes if n.removeprefix("calibration: ") in x.timeline.notes]
    assert any(n.startswith("calibration: read lines") for n in x.advice.notes)


# --- a cut bucket list, and the engine's rebuild checked against the log -----------------------------

def test_ranges_of_a_cut_list_are_not_reported_as_facts():
    x = explain(_lines(PR345_CUT))
    decode = next(p for p in x.phases if p.phase == "decode")
    assert (decode.count, decode.listed, decode.complete) == (112, 37, False)
    doc = to_json(x)
    assert doc["buckets"]["decode"]["ranges"] is None and doc["buckets"]["decode"]["listed"] == 37
    text = render_text(x)
    assert "cut after 37 of 112" in text and "ranges: bs 1..4," not in text
    # no max_num_seqs=4 read off the cut list: the advice says what it lacks instead of guessing
    assert not any("max_num_seqs=4" in a for a in x.advice.assumptions)
    assert any("cut after 37 of 112" in n for n in x.advice.notes)


def test_a_rebuild_that_disagrees_with_the_log_is_flagged():
    proc = _cli(str(LOG_SAMPLES / PR345_CUT), "--max-num-seqs", "4")
    assert proc.returncode == 0, proc.stderr
    assert "CHECK FAILED" in proc.stdout and "!= this log" in proc.stdout
    assert "24 prompt and 1 decode buckets, the log shows 31 prompt and 112 decode" in " ".join(proc.stdout.split())
    doc = json.loads(_cli("--json", str(LOG_SAMPLES / "vllm-gaudi_docs_startup.log")).stdout)
    assert "the log shows 36 prompt and 42 decode" in doc["advice"]["rebuild_mismatch"]
    assert any(s.startswith("Check failed:") for s in doc["summary"])


def test_graph_summaries_that_list_every_bucket_are_the_bucket_lists():
    """The fork 1.18 performance-tuning doc skips the bucket lines; its graph summaries list every bucket
    (`captured:24 (100.0%) .. buckets:[..]`): the settings are rebuilt from them, and without timed steps
    the log's total is shared by its buckets, not half per phase (1 decode bucket is not 16 s)."""
    x = explain(_lines("vllm-gaudi_docs_performance_tuning_fork-1.18.log"))
    prompt = next(p for p in x.phases if p.phase == "prompt")
    assert (prompt.count, prompt.listed, prompt.ranges) == (24, 24, ((1, 4), (128, 1024)))
    logged = next(a for a in x.advice.alternatives if a.name == "as logged")
    assert (logged.prompt_buckets, logged.decode_buckets) == (24, 1) and x.advice.rebuild_mismatch is None
    for alt in x.advice.alternatives:
        assert alt.predicted_warmup_s == pytest.approx(32 * (alt.prompt_buckets + alt.decode_buckets) / 25)


# --- skip_warmup, numbers in the text ---------------------------------------------------------------

def test_skip_warmup_true_in_the_runtime_dump_is_read_as_true():
    x = explain(_lines("real/plugin_issue891_gptoss_runtime_dump.log"))
    assert x.timeline.skipped and "skip_warmup: True" in x.timeline.skip_evidence
    assert to_json(x)["warmup"]["skipped"] is True
    assert "Warm-up is skipped" in render_text(x)


@pytest.mark.parametrize("name", LOGS)
def test_the_text_never_cuts_a_number(name):
    x = explain(_lines(name))
    text = " ".join(render_text(x).split())            # wrapped lines joined
    for p in x.phases:
        for dim, (lo, hi) in zip(p.dims, p.ranges):
            assert f"{dim} {lo}..{hi}" in text
    assert all(len(line) <= WIDTH for line in render_text(x).splitlines()
               if not line.lstrip().startswith("bucket-tuner tune"))


# --- --model-shape: the log's tensor-parallel size, generic shapes ----------------------------------

ENGINE_TP2 = ("INFO 08-02 17:37:40 llm_engine.py:176] Initializing an LLM engine (v0.5.3.post1) with config: "
              "model='meta-llama/Meta-Llama-3.1-8B', speculative_config=None, "
              "tokenizer='meta-llama/Meta-Llama-3.1-8B', "
              "dtype=torch.bfloat16, max_seq_len=2048, tensor_parallel_size=2, pipeline_parallel_size=1, "
              "device_config=hpu")


def test_model_shape_takes_the_tensor_parallel_size_from_the_log():
    log = "\n".join([ENGINE_TP2, *_lines(F117)]) + "\n"
    doc = json.loads(_cli("--json", "--model-shape", "llama-3.1-8b", "-", stdin=log).stdout)
    assert doc["server"]["tp"] == 2 and doc["server"]["tp_exact"]
    assert doc["advice"]["predicted_by"].startswith("the performance model (gaudi2, llama-3.1-8b, bf16, TP 2)")
    forced = json.loads(_cli("--json", "--model-shape", "llama-3.1-8b", "--tensor-parallel-size", "1", "-",
                             stdin=log).stdout)
    assert "TP 1)" in forced["advice"]["predicted_by"]


def test_model_shape_takes_any_model_known_from_its_config_and_refuses_a_name_nothing_knows(tmp_path):
    proc = _cli(str(LOG_SAMPLES / F117), "--json", "--model-shape", "Qwen/Qwen2.5-32B")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert "Qwen/Qwen2.5-32B" in doc["advice"]["predicted_by"]
    logged = next(a for a in doc["advice"]["alternatives"] if a["name"] == "as logged")
    assert logged["predicted_warmup_s"] is not None and logged["error"] is None
    # a model folder of the user's own: its config.json is the model
    folder = tmp_path / "my-finetune"
    folder.mkdir()
    (folder / "config.json").write_text((ROOT / "tuner/models/catalogue/Qwen__Qwen3-8B.json").read_text())
    proc = _cli(str(LOG_SAMPLES / F117), "--json", "--model-shape", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert str(folder) in json.loads(proc.stdout)["advice"]["predicted_by"]
    proc = _cli(str(LOG_SAMPLES / F117), "--model-shape", "my-org/custom-13b")
    assert proc.returncode == 2 and "unknown model 'my-org/custom-13b'" in proc.stderr
    assert "config.json" in proc.stderr and "Traceback" not in proc.stderr


def test_ranks_repeating_the_bucket_lines_are_one_start():
    """Every tensor-parallel rank prints the bucket config and lists: one start, not one per rank."""
    ranks = [f"(VllmWorker rank={r} pid={900 + r}) {line}" for line in _lines(F117) for r in range(4)]
    x = explain(ranks)
    assert len(x.reading.runs) == 2 and x.bucket_counts == {"prompt": 24, "decode": 48}
    assert _figures(x.timeline.phases) == FACTS[F117]["phases"]
