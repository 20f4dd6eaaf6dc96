"""The launch command pasted above a log gives the server's settings the log itself does not print
(tuner/explain/command.py): every way a command is pasted, and the engine's own lines winning."""

from __future__ import annotations

import pytest

from tuner.explain import explain
from tuner.explain.command import CommandCollector, command_settings

RECORD = "INFO 01-27 11:07:39 [__init__.py:45] - hpu -> vllm_gaudi:register"


def _settings(lines: list[str]) -> str | None:
    c = CommandCollector()
    for line in lines:
        c.feed(line)
    return c.settings()


@pytest.mark.parametrize("lines", [
    ["vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 8 --max-num-seqs 64", RECORD],
    ["$ vllm serve meta-llama/Llama-3.1-8B-Instruct \\", "    --tensor-parallel-size 8 \\",
     "    --max-num-seqs 64", "", RECORD],
    ["```bash", "VLLM_SKIP_WARMUP=true python -m vllm.entrypoints.openai.api_server --model "
     "meta-llama/Llama-3.1-8B-Instruct --tensor_parallel_size=8 --max-num-seqs=64", "```", RECORD],
    ["docker run -it --runtime=habana -e HABANA_VISIBLE_DEVICES=all vault.habana.ai/gaudi-docker/vllm \\",
     "  vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 8 --max-num-seqs 64", RECORD],
    # the paste began inside the command: its flag lines alone
    ["  --model meta-llama/Llama-3.1-8B-Instruct \\", "  --tensor-parallel-size 8 \\", "  --max-num-seqs 64", "",
     RECORD],
    # flags as vLLM's parser takes them: an unambiguous prefix, underscores and =
    ["vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel 8 --max_num_seq=64", RECORD],
])
def test_every_way_a_command_is_pasted(lines):
    s = _settings(lines)
    assert s is not None and "tensor_parallel_size=8" in s and "max_num_seqs=64" in s
    assert "model='meta-llama/Llama-3.1-8B-Instruct'" in s


def test_a_command_a_terminal_wrapped_inside_a_flag():
    wrapped = ["VLLM_SKIP_WARMUP=true python -m vllm.entrypoints.openai.api_server    --port 8000    --model "
               "unsloth/gpt-oss-120b-BF16    --tensor-parallel-size 2   --max",
               "-num-seqs 128    --dtype bfloat16    --max-model-len 32768", RECORD]
    s = _settings(wrapped)
    assert "max_num_seqs=128" in s and "max_model_len=32768" in s and "tensor_parallel_size=2" in s


def test_no_command_no_settings_and_a_cut_quote_is_survived():
    assert _settings([RECORD, "Calling mark_step function does not have any effect."]) is None
    # an unbalanced quote (a cut paste): read word by word instead of refused
    assert "tensor_parallel_size=4" in command_settings("vllm serve 'my model --tensor-parallel-size 4")
    assert "tensor_parallel_size=4" in command_settings('vllm serve m --tensor-parallel-size 4 --x "cut')


def test_the_engines_own_settings_win_over_the_command():
    x = explain(["vllm serve m --tensor-parallel-size 2 --max-num-seqs 8",
                 "INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: model='m', "
                 "dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=4, max_num_seqs=16"])
    assert x.server.tp == 4 and x.server.tp_evidence == "tensor_parallel_size in the engine's settings"
    assert x.server.max_num_seqs == 16


def test_a_command_alone_names_the_server():
    x = explain(["vllm serve Qwen/Qwen3-30B-A3B --tensor-parallel-size 2 --max-model-len 8192 --enforce-eager",
                 RECORD, "INFO 01-27 11:07:39 [__init__.py:217] Platform plugin hpu is activated"])
    assert (x.server.tp, x.server.tp_exact, x.server.model, x.server.max_model_len, x.server.enforce_eager) == \
        (2, True, "Qwen/Qwen3-30B-A3B", 8192, True)
    assert x.server.tp_evidence == "--tensor-parallel-size in the pasted command"


def test_a_log_record_naming_vllm_serve_is_no_command():
    hint = "WARNING 01-27 11:07:39 [api_server.py:1] Use `vllm serve --tensor-parallel-size 2` to start it"
    assert _settings([hint, "vllm serve m --tensor-parallel-size 4", RECORD]) == \
        "pasted command: model='m' tensor_parallel_size=4"


def test_a_commands_flags_are_read_as_vllm_reads_them_and_docker_s_are_not():
    s = command_settings("docker run --rm --runtime=habana -e HABANA_VISIBLE_DEVICES=all --name vllm img "
                         "vllm serve Qwen/Qwen3-8B -tp 2 --max-model 32k --max-num-batched 8K --gpu-memory-util 0.8")
    assert s == ("pasted command: model='Qwen/Qwen3-8B' tensor_parallel_size=2 max_model_len=32000 "
                 "max_num_batched_tokens=8192 gpu_memory_utilization=0.8")
