"""explain never infers a setting below what the log itself shows."""

from __future__ import annotations

from tuner.explain import explain

from ..conftest import LOG_SAMPLES


def test_max_model_len_is_not_assumed_below_the_decode_context_the_log_warms():
    # fork 1.17 decodes over seq_len in tokens: its decode buckets reach 2048 while prompts stop at 1024
    x = explain((LOG_SAMPLES / "fork-v0.5.3-gaudi-1.17_readme_startup.log").read_text().splitlines())
    decode = next(p for p in x.phases if p.phase == "decode")
    assert decode.ranges[-1][1] == 2048
    assert x.advice.server["max_model_len"] == 2048
    assert any(a.startswith("max_model_len=2048") for a in x.advice.assumptions)
