"""The release defaults of max_num_seqs and max_num_batched_tokens (`vllm serve` on an HPU, neither given).

Sources, read at the tags named in tuner/buckets/serverdefaults.py:
- vllm-fork (every fork profile): vllm/engine/arg_utils.py sets max_num_seqs to 256 (a field default to 1.19,
  __post_init__ on 1.20/1.21.0, _set_default_args_v0 from 1.21.2) and switches chunked prefill on only for
  CUDA, so vllm/config.py SchedulerConfig takes max(max_model_len, 2048) (_MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS
  5120 for a multimodal model from 1.19 (v0.6.4.post2); min(max_num_seqs * max_model_len, ...) from 1.22
  (v0.9.0.1, 2e9b2b3), also habana_main 95af700 and v1.23.0 6ecf39c).
- vllm-gaudi: vllm_gaudi/platform.py has no get_device_total_memory at v0.10.1 (the base raises, vLLM's
  try/except makes it 0) and returns 0 at v0.15.1 / v0.26.0 / main, so vLLM's EngineArgs takes the small
  OPENAI_API_SERVER row, 2048 tokens and 256 sequences, with chunked prefill on (v0.10.1
  _set_default_args_v1; v0.15.1 and v0.26.0 get_batch_defaults and
  _set_default_max_num_seqs_and_batched_tokens_args, which also cut the budget to max_num_seqs *
  max_model_len); a defaulted max_num_seqs is cut to the budget (every v1 version read).
"""

from __future__ import annotations

import pytest

from tuner.buckets import profiles
from tuner.buckets.serverdefaults import DEFAULTS, resolve

FORK = ("fork-1.17", "fork-1.18", "fork-1.19", "fork-1.20", "fork-1.21.0", "fork-1.21.2", "fork-1.22", "fork-main",
        "fork-1.23")
GAUDI = ("gaudi-0.10.1", "gaudi-0.15.1", "gaudi-0.26.0", "gaudi-main")


def test_every_profile_has_a_row_with_its_source():
    assert set(DEFAULTS) == {p.name for p in profiles().values()} == set(FORK + GAUDI)
    assert all(d.source for d in DEFAULTS.values())


@pytest.mark.parametrize("release", FORK + GAUDI + ("fork-1.21.3", "gaudi-0.27.0"))
@pytest.mark.parametrize("mml", [1024, 4096, 131072])
def test_neither_given(release, mml):
    r = resolve(release, mml)
    fork = release.startswith("fork")
    assert (r.max_num_seqs, r.max_num_batched_tokens) == (256, max(mml, 2048) if fork else 2048)
    assert set(r.notes) == {"max_num_seqs", "max_num_batched_tokens"}
    assert release.split("-")[0] in r.notes["max_num_batched_tokens"]


# max_num_seqs=1, max_model_len=1024: the budget is cut to 1 x 1024 from fork 1.22 and vllm-gaudi 0.15.1 on.
CUT = {"fork-1.17": 2048, "fork-1.18": 2048, "fork-1.19": 2048, "fork-1.20": 2048, "fork-1.21.0": 2048,
       "fork-1.21.2": 2048, "fork-1.22": 1024, "fork-main": 1024, "fork-1.23": 1024,
       "gaudi-0.10.1": 2048, "gaudi-0.15.1": 1024, "gaudi-0.26.0": 1024, "gaudi-main": 1024}


@pytest.mark.parametrize("release,budget", sorted(CUT.items()))
def test_budget_cut_to_max_num_seqs_times_max_model_len(release, budget):
    r = resolve(release, 1024, max_num_seqs=1)
    assert (r.max_num_seqs, r.max_num_batched_tokens) == (1, budget)
    assert list(r.notes) == ["max_num_batched_tokens"]   # the given max_num_seqs is not a default


@pytest.mark.parametrize("release,budget", [("fork-1.18", 2048), ("fork-1.19", 5120), ("fork-1.23", 5120),
                                            ("gaudi-0.10.1", 2048), ("gaudi-main", 2048)])
def test_multimodal_floor_on_the_fork_from_1_19(release, budget):
    assert resolve(release, 1024, multimodal=True).max_num_batched_tokens == budget


@pytest.mark.parametrize("release,seqs", [("fork-1.21.2", 256), ("gaudi-0.10.1", 128), ("gaudi-0.26.0", 128)])
def test_a_defaulted_max_num_seqs_follows_a_small_given_budget_on_v1_only(release, seqs):
    r = resolve(release, 128, max_num_batched_tokens=128)
    assert (r.max_num_seqs, r.max_num_batched_tokens, list(r.notes)) == (seqs, 128, ["max_num_seqs"])


def test_given_values_are_kept_and_unknown_release_refused():
    assert resolve("gaudi-main", 4096, 64, 8192).notes == {}
    with pytest.raises(Exception, match="fork-9"):
        resolve("fork-9", 4096)
