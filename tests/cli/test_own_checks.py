"""calc, fit and explain's alternatives pass their own checks: the settings they print do not draw their own
warnings afterwards, or they name the constraint that makes it impossible and what to relax (issue 34)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from tuner.buckets import ServerConfig, get_profile
from tuner.buckets.coverage import coverage_gaps
from tuner.cli import main
from tuner.explain import explain

README_CALC = ["calc", "--input-len", "2048", "--output-len", "512", "--range-ratio", "0.5", "--bs-list", "8,16,32"]
README_FIT = ["fit", "--input-len", "1024", "--output-len", "256", "--range-ratio", "0.8", "--max-concurrency", "32",
              "--max-buckets", "8"]
LOGS = Path(__file__).resolve().parents[1] / "data" / "log-samples"


def test_calc_env_for_fork_1212_skips_no_prompt_bucket_and_says_why_the_batch_is_capped(capsys):
    assert main(README_CALC + ["--release", "fork-1.21.2", "--format", "env"]) == 0
    out = capsys.readouterr().out
    assert "exceed the token budget" not in out and "warning" not in out
    flags = out.splitlines()[0]
    assert "--max-num-batched-tokens 3840" in flags and "--max-num-prefill-seqs 1" in flags
    assert "export VLLM_PROMPT_BS_BUCKET_MAX=1" in out
    assert "raise --max-num-batched-tokens to 2 x 3,840" in " ".join(out.replace("#  ", "").split())
    assert all(len(line) <= 80 for line in out.splitlines()[1:])


def test_calc_review_settings_rebuild_without_omissions_or_gaps(capsys):
    assert main(README_CALC + ["--release", "fork-1.21.2"]) == 0
    review = json.loads(capsys.readouterr().out)["release_review"]
    flags = dict(zip(review["server_flags"][::2], review["server_flags"][1::2]))
    cfg = ServerConfig(block_size=128, max_num_seqs=32, max_model_len=int(flags["--max-model-len"]),
                       max_num_batched_tokens=int(flags["--max-num-batched-tokens"]),
                       max_num_prefill_seqs=int(flags["--max-num-prefill-seqs"]),
                       num_hpu_blocks=review["num_hpu_blocks"], env=review["env"])
    plan = get_profile("fork-1.21.2").build(cfg)
    assert plan.omitted_prompt == [] and coverage_gaps(plan, cfg, "v0") == []
    assert review["warnings"] == []


def test_calc_names_the_constraint_where_the_release_cannot_cap_the_prompt_batch(capsys):
    # fork 1.18 has no --max-num-prefill-seqs: the skipped buckets stay, said with what to relax
    assert main(README_CALC + ["--release", "fork-1.18"]) == 0
    review = json.loads(capsys.readouterr().out)["release_review"]
    said = [w for w in review["warnings"] if "exceed the token budget" in w]
    assert len(said) == 1 and "no --max-num-prefill-seqs" in said[0] and "raise --max-num-batched-tokens" in said[0]


def test_fit_prints_no_warning_against_its_choice(capsys):
    assert main(README_FIT) == 0
    out = capsys.readouterr().out
    assert "warning" not in out
    assert "576 blocks" in out   # the worst case its top decode bucket reaches, said
    assert all(len(line) <= 80 for line in out.splitlines())


def test_fit_top_decode_bucket_reaches_every_batch_sizes_worst_case(capsys):
    assert main(README_FIT + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["warnings"] == []
    worst = doc["decode"]["worst_case_blocks"]
    for bs, fitted in doc["decode"]["per_batch_size"].items():
        assert fitted["boundaries"][-1] >= worst[bs]
    # the closest linear settings reach it too
    assert all(row["closest_linear"]["VLLM_DECODE_BLOCK_BUCKET_MAX"] >= worst["32"]
               for row in doc["decode"]["curve"] if row["closest_linear"])


def test_explain_alternatives_cover_the_server_the_advice_assumed():
    log = LOGS / "fork-v0.5.3-gaudi-1.17_readme_startup.log"
    x = explain(log.read_text().splitlines(), source=str(log))
    cfg = ServerConfig(**x.advice.server)
    profile = get_profile(x.advice.profile)
    by_name = {a.name: a for a in x.advice.alternatives}
    # the logged settings leave prompts past 1,024 tokens unwarmed at max_model_len 2,048: said, not hidden
    assert by_name["as logged"].gaps and "short of max_model_len 2,048" in by_name["as logged"].gaps[0]
    coarse = by_name["coarser steps"]
    assert coarse.gaps == () and any("VLLM_PROMPT_SEQ_BUCKET_MAX raised from 1,024 to 2,048" in r
                                     for r in coarse.raised)
    for a in x.advice.alternatives:
        if a.name == "as logged" or a.error:
            continue
        plan = profile.build(replace(cfg, env=a.env), a.strategy)
        assert coverage_gaps(plan, cfg, profile.engine) == [], a.name


def test_explain_headline_advice_is_an_alternative_without_gaps(capsys):
    log = LOGS / "fork-v0.5.3-gaudi-1.17_readme_startup.log"
    assert main(["explain", str(log)]) == 0
    out = capsys.readouterr().out
    advice = " ".join(next(line for line in out.split("\n\n") if "Advice:" in line).split())
    assert "coarser steps would build 27 prompt and 27 decode buckets" in advice
    assert "the logged settings leave a gap" in out
