"""The simulator starts with the release's max_num_seqs / max_num_batched_tokens when the flags are absent:
the same table as `bucket-tuner buckets` and the model (tuner/buckets/serverdefaults.py)."""

from __future__ import annotations

import pytest

from tuner.perfmodel import predict_startup
from tuner.sim.serve import build_parser, settings_from_args


@pytest.mark.parametrize("release,mml,flags,seqs,budget", [
    ("fork-1.21.2", 4096, [], 256, 4096),                               # v0: max(max_model_len, 2048)
    ("fork-1.23", 1024, ["--max-num-seqs", "1"], 1, 1024),              # cut to max_num_seqs x max_model_len
    ("gaudi-0.10.1", 4096, [], 256, 2048),                              # v1, chunked prefill, HPU memory 0
    ("gaudi-main", 4096, ["--max-num-batched-tokens", "128"], 128, 128),  # max_num_seqs cut to the budget
])
def test_sim_takes_the_release_defaults(release, mml, flags, seqs, budget):
    args = build_parser().parse_args(["llama-3.1-8b", "--max-model-len", str(mml), "--sim-release", release, *flags])
    sim, inputs = settings_from_args(args)
    pred = predict_startup(release, sim, inputs, {})
    assert (pred.config.max_num_seqs, pred.config.max_num_batched_tokens) == (seqs, budget)
