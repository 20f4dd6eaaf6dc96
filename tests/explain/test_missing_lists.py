"""A log whose bucket lists are not in the excerpt: their counts are unknown, never zero, and a warm-up
that ran is never predicted to take 0 s."""

from __future__ import annotations

from tuner.explain import explain
from tuner.explain.render import plain_words

LINES = [
    "(EngineCore_DP0 pid=7) INFO 11-27 09:59:30 [exponential.py:36] Prompt bucket config (min, step, max_warmup, "
    "limit) bs:[1, 2, 1, 1], query:[128, 128, 1024, 3], blocks:[0, 128, 512, 3]",
    "(EngineCore_DP0 pid=7) INFO 11-27 09:59:30 [exponential.py:36] Decode bucket config (min, step, max_warmup, "
    "limit) bs:[1, 2, 4, 3], blocks:[128, 128, 2048, 3]",
    "(EngineCore_DP0 pid=7) INFO 11-27 10:06:39 [hpu_model_runner.py:4301] Warmup finished in 429 secs, "
    "allocated 2.5 GiB of device memory",
]


def test_lists_not_in_the_excerpt_are_unknown_not_never_generated():
    x = explain(LINES)
    text = " ".join(plain_words(x))
    assert "stopped before generating" not in text and "not in this excerpt" in text
    assert all(a.predicted_warmup_s != 0 for a in x.advice.alternatives), [(a.name, a.predicted_warmup_s)
                                                                     for a in x.advice.alternatives]
