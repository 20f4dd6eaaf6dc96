"""`vllm serve` arguments read as vLLM's parser reads them (tuner/vocabulary/serveargs.py): aliases, unambiguous
prefixes, underscores, dotted JSON keys, -O; an ambiguous prefix or a missing value refused as vLLM refuses it.
The genuine parser's own reading of the same lines: tests/realvllm/test_serve_args_vllm.py."""

from __future__ import annotations

import json

import pytest

from tuner.serve.backends import server_options
from tuner.vocabulary.serveargs import ServeArgsError, canonical_argv, preprocess

CASES = {
    "alias": (["-tp", "2", "-q", "fp8"], {"tensor_parallel_size": 2, "quantization": "fp8"}),
    "prefix": (["--tensor-parallel", "4", "--max-num-seq", "64", "--gpu-memory-util=0.8"],
               {"tensor_parallel_size": 4, "max_num_seqs": 64, "gpu_memory_utilization": 0.8}),
    "underscores": (["--max_num_seqs", "32", "--max_model_len=8192", "--enable_prefix_caching"],
                    {"max_num_seqs": 32, "max_model_len": 8192, "enable_prefix_caching": True}),
    "alias spelling": (["--device-memory-utilization", "0.7"], {"gpu_memory_utilization": 0.7}),
    "no- prefix": (["--no-enable-prefix"], {"enable_prefix_caching": False}),
    "last wins": (["--max-num-seqs", "8", "--max-num-seq", "16"], {"max_num_seqs": 16}),
    "auto length": (["--max-model-len", "-1"], {"max_model_len": -1}),
}


@pytest.mark.parametrize("argv,want", CASES.values(), ids=CASES.keys())
def test_server_options_are_read_as_vllm_reads_the_line(argv, want):
    assert server_options(argv) == want


def test_dotted_keys_make_one_json_object_given_after_the_rest():
    argv = ["--speculative-config.method", "mtp", "--max-num-seqs", "8",
            "--speculative_config.num_speculative_tokens=2", "--hf-overrides.rope_scaling.factor", "4.0",
            "--hf-overrides.rope_scaling.rope_type", "yarn", "--limit-mm-per-prompt.image", "2"]
    got = canonical_argv(argv)
    assert got[:2] == ["--max-num-seqs", "8"]
    objects = dict(zip(got[2::2], got[3::2]))
    assert json.loads(objects["--speculative-config"]) == {"method": "mtp", "num_speculative_tokens": 2}
    assert json.loads(objects["--hf-overrides"]) == {"rope_scaling": {"factor": 4.0, "rope_type": "yarn"}}
    assert json.loads(objects["--limit-mm-per-prompt"]) == {"image": 2}
    assert server_options(argv)["speculative_config"] == objects["--speculative-config"]


def test_dotted_values_read_as_vllm_reads_them():
    # JSON first, then vLLM's human-readable integers (1k is 1,000; 1K 1,024), else text; key+ appends items
    got = preprocess(["--x.a", "1k", "--x.b", "2K", "--x.c", "true", "--x.d", "text", "--x.e+", "p,q"])
    assert got[0] == "--x" and json.loads(got[1]) == {"a": 1000, "b": 2048, "c": True, "d": "text",
                                                       "e": ["p", "q"]}


@pytest.mark.parametrize("word,want", [("-O3", ["--optimization-level", "3"]), ("-O=2", ["--optimization-level", "2"]),
                                       ("-O 1", ["--optimization-level", "1"])])
def test_optimization_level_short_forms(word, want):
    assert preprocess(word.split()) == want


def test_values_and_unknown_flags_are_left_as_given():
    argv = ["--served-model-name", "a", "b", "--my-own-flag", "x", "--tool-call-parser", "hermes"]
    assert canonical_argv(argv) == argv


@pytest.mark.parametrize("argv,words", [
    (["--max", "8"], "ambiguous option: --max could match"),
    (["--enable-p"], "--enable-prefix-caching"),
    (["--max-num-seqs"], "expected one argument"),
    (["--speculative-config.method"], "expected one argument"),
])
def test_a_line_vllm_refuses_is_refused_with_its_words(argv, words):
    with pytest.raises(ServeArgsError, match=words.replace("(", r"\(")):
        canonical_argv(argv)
