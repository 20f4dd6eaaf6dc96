"""A production `vllm serve` command line given to the simulator (a study's --server-args): the flags it does not
model are taken, shown in its non-default args and named once in its log; a flag no vLLM knows is refused as vLLM
refuses it (tuner/sim/vllmflags.py, vllm_serve_flags.json from vLLM 0.32's parser and the fork releases')."""

from __future__ import annotations

import pytest

from tuner.sim.serve import build_parser, non_default_args
from tuner.sim.vllmflags import given

PRODUCTION = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
              "--chat-template", "tool.jinja", "--enable-chunked-prefill", "--async-scheduling",
              "--distributed-executor-backend", "mp", "--uvicorn-log-level", "warning", "--generation-config",
              "vllm", "--hf-token", "hf_secret_value",
              # the fork's releases' own (vLLM 0.6-0.9): gone from 0.32's parser
              "--swap-space", "16", "--num-scheduler-steps", "1", "--weights-load-device", "cpu"]


def test_a_production_command_line_is_taken_and_what_is_not_modelled_is_named():
    parser = build_parser()
    args = parser.parse_args(["Qwen/Qwen3-8B", "--release", "gaudi-main", "--max-model-len", "8192", *PRODUCTION])
    args.unmodelled = parser.unmodelled
    taken = given(args, parser.unmodelled)
    assert taken["tool_call_parser"] == "hermes" and taken["enable_chunked_prefill"] is True
    assert taken["swap_space"] == "16" and taken["weights_load_device"] == "cpu"
    said = non_default_args(args)
    assert said["reasoning_parser"] == "qwen3" and said["max_model_len"] == 8192
    assert "hf_token" not in said and "hf_secret_value" not in repr(said)  # a secret is never logged
    # the simulator's own flags are its own: --max-model-len is modelled, not taken twice
    assert "max_model_len" not in taken


@pytest.mark.parametrize("flag", ["--no-such-flag", "--tool-call-parsr"])
def test_a_flag_no_vllm_knows_is_refused_as_vllm_refuses_it(flag, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["Qwen/Qwen3-8B", flag, "x"])
    assert info.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_the_flags_of_a_boolean_switch_take_both_forms():
    parser = build_parser()
    off = parser.parse_args(["m", "--no-enable-chunked-prefill"])
    assert given(off, parser.unmodelled) == {"enable_chunked_prefill": False}
    assert given(parser.parse_args(["m"]), parser.unmodelled) == {}


def test_dotted_keys_and_short_forms_reach_the_simulator_as_vllm_hands_them_on():
    # vLLM's parser makes `--speculative-config.method mtp ...` one JSON object and -O3 --optimization-level 3
    # before argparse reads the line; the simulator's main() does the same (vocabulary.serveargs.preprocess)
    from tuner.vocabulary.serveargs import preprocess

    parser = build_parser()
    args = parser.parse_args(preprocess(["m", "--speculative-config.method", "mtp", "-O3", "--max_num_seqs", "8",
                                            "--speculative_config.num_speculative_tokens", "1", "--max-num-seq", "16"]))
    assert args.speculative_config == '{"method": "mtp", "num_speculative_tokens": 1}'
    assert args.max_num_seqs == 16   # the last one given, through its unambiguous prefix
    assert given(args, parser.unmodelled)["optimization_level"] == "3"
