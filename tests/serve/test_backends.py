"""A trial's server options become `vllm serve` flags the way vLLM reads them (the tier boots only the
eager path; the other side of each switch is checked here)."""

from __future__ import annotations

import pytest

from tuner.serve.backends import BackendError, server_flags, server_options


def test_switches_appear_only_when_on_and_prefix_caching_can_be_turned_off():
    assert server_flags({"max_num_seqs": 64, "enforce_eager": True}) == ["--max-num-seqs", "64", "--enforce-eager"]
    assert server_flags({"max_num_seqs": 64, "enforce_eager": False}) == ["--max-num-seqs", "64"]  # torch.compile
    assert server_flags({"enable_prefix_caching": False}) == ["--no-enable-prefix-caching"]
    assert server_flags({"enable_prefix_caching": True}) == ["--enable-prefix-caching"]
    assert server_flags({"max_model_len": None, "block_size": 128}) == ["--block-size", "128"]


def test_flags_read_back_to_the_same_options():
    options = {"max_num_seqs": 32, "max_model_len": 4096, "enforce_eager": True, "gpu_memory_utilization": 0.9}
    assert server_options(server_flags(options)) == options


def test_an_unknown_option_is_named():
    with pytest.raises(BackendError, match="max_num_seq"):
        server_flags({"max_num_seq": 4})
