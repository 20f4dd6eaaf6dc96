"""fork-1.17 with `token_budget_phases`: the habana_main builds between the 1.17 and 1.18 releases, which
drop buckets above max_num_batched_tokens (vllm-fork #208: prompt and decode; #241: prompt only). The
counts are the ones those builds logged (PR #208: 23/31 at 2048) and the same code's at 32768."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tuner.buckets import IGNORED, BucketConfigError, ServerConfig, get_profile

F117 = get_profile("fork-1.17")
# PR #208's start: bs:[1, 32, 64], seq:[128, 128, 1024] / bs:[1, 128, 256], seq:[128, 128, 2048]
PR208 = dict(block_size=128, max_num_seqs=256, max_model_len=1024, num_hpu_blocks=4096)


def _plan(tokens: int, phases=("prompt", "decode")):
    return F117.build(ServerConfig(max_num_batched_tokens=tokens, token_budget_phases=phases, **PR208))


@pytest.mark.parametrize("tokens,prompt,decode,omitted", [(2048, 23, 31, 33), (32768, 52, 95, 4)])
def test_both_phases_filtered_as_the_builds_logged(tokens, prompt, decode, omitted):
    plan = _plan(tokens)
    assert (len(plan.prompt), len(plan.decode), len(plan.omitted_prompt)) == (prompt, decode, omitted)
    assert all(b * s <= tokens for b, s in plan.prompt + plan.decode)
    assert f"Omitted {omitted} prompt buckets due to exceeded token budget (max_num_batched_tokens={tokens})" \
        in plan.log_lines
    assert f"Omitted {144 - decode} decode buckets due to exceeded token budget " \
           f"(max_num_batched_tokens={tokens})" in plan.log_lines


def test_pr208_lists_are_rebuilt_bucket_for_bucket():
    plan = _plan(2048)
    assert sorted(plan.prompt) == [(1, 128), (1, 256), (1, 384), (1, 512), (1, 640), (1, 768), (1, 896), (1, 1024),
                                   (2, 128), (2, 256), (2, 384), (2, 512), (2, 640), (2, 768), (2, 896), (2, 1024),
                                   (4, 128), (4, 256), (4, 384), (4, 512), (8, 128), (8, 256), (16, 128)]


def test_prompt_only_keeps_every_decode_bucket():
    plan = _plan(2048, ("prompt",))
    assert (len(plan.prompt), len(plan.decode)) == (23, 144)


def test_the_117_release_filters_nothing():
    plan = _plan(2048, ())
    assert (len(plan.prompt), len(plan.decode), plan.omitted_prompt) == (56, 144, [])
    assert not any(line.startswith("Omitted") for line in plan.log_lines)


def test_nothing_under_the_budget_keeps_everything_and_says_so():
    plan = _plan(64)
    assert len(plan.prompt) == 56 and "cannot be used with specified max_num_batched_tokens (64)" in plan.warnings[0]


def test_other_releases_report_it_ignored_and_a_bad_phase_is_refused():
    plan = get_profile("fork-1.18").build(ServerConfig(max_num_batched_tokens=2048, token_budget_phases=("prompt",),
                                                       **PR208))
    assert plan.setting("token_budget_phases").source == IGNORED
    with pytest.raises(BucketConfigError, match="'warmup' is no phase"):
        ServerConfig(max_num_batched_tokens=2048, token_budget_phases=("warmup",), **PR208)


def test_buckets_command_takes_the_filter():
    out = subprocess.run([sys.executable, "-m", "tuner.cli", "buckets", "--release", "fork-1.17",
                          "--token-budget-filter", "both", "--max-num-seqs", "256", "--max-model-len", "1024",
                          "--max-num-batched-tokens", "32768", "--num-hpu-blocks", "4096"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "prompt buckets:     52" in out.stdout and "decode buckets:     95" in out.stdout


def test_an_unknown_release_names_the_close_ones():
    with pytest.raises(BucketConfigError, match="did you mean fork-1.18"):
        get_profile("fork-1.188")
