"""The tuning-efficiency scenario real_steps (benchmarks/tuning/realsteps.py): its truth's warm-up steps
cost what the public logs' timed steps cost, not what the model's cost rules say."""

from __future__ import annotations

import math

import pytest


def test_points_come_from_the_timed_logs():
    from benchmarks.tuning.realsteps import points

    table = points("linear")
    # fork 1.17 README, Gaudi 2: 24 prompt compiles in 13 s, decode 3..47 in 15 s, 63 captures in ~21 s
    (size,), (secs,) = table[("compile", "prompt")]
    assert secs == pytest.approx(13 / 24, rel=0.01) and 500 < size < 4096
    assert table[("compile", "decode")][1][0] == pytest.approx(16 / 47, rel=0.01)
    assert 0.25 < table[("capture", "decode")][1][0] < 0.5 and 0.25 < table[("capture", "prompt")][1][0] < 0.6
    with pytest.raises(ValueError, match="no timed real log for problem 'gaudi'"):
        points("gaudi")


def test_the_truth_ignores_the_models_cost_rules():
    from benchmarks.tuning.problems import problems
    from benchmarks.tuning.truth import true_prediction

    linear = problems()["linear"]
    settings = linear.search_space(quick=True).settings_for(
        {"max_num_seqs": 128, "VLLM_GRAPH_RESERVED_MEM": 0.1, "VLLM_GRAPH_PROMPT_RATIO": 0.3,
         "VLLM_PROMPT_BS_BUCKET_STEP": 4, "VLLM_PROMPT_SEQ_BUCKET_STEP": 128, "VLLM_DECODE_BS_BUCKET_STEP": 32,
         "VLLM_DECODE_BLOCK_BUCKET_STEP": 128})
    prior, real = true_prediction(linear, settings, 0.0, "real_steps", perturb=False)
    decode = [(p, r) for p, r in zip(prior.steps, real.steps) if p.kind == "compile" and p.phase == "decode"]
    # the model's decode compile grows with the blocks read; the logs' steps do not (flat past their sizes)
    assert max(p.seconds for p, _ in decode) > 2 * min(p.seconds for p, _ in decode)
    assert len({round(r.seconds, 6) for _, r in decode}) == 1
    assert [(s.phase, s.index, s.kind) for s in real.steps] == [(s.phase, s.index, s.kind) for s in prior.steps]
    assert math.isclose(real.warmup_seconds, sum(s.seconds for s in real.steps) + real.sampler_seconds)
