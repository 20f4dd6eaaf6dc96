"""--server-args read as the genuine vLLM's parser reads them: the same command lines through vLLM 0.32's own
`vllm serve` parser (FlexibleArgumentParser with make_arg_parser) and through tuner/vocabulary/serveargs.py,
compared option by option; a line vLLM refuses is refused by both. And the table that reading (and the
simulator) stands on, tuner/vocabulary/vllm_serve_flags.json, is that parser's: every option string with the
values it takes (tools/vllm_serve_flags.py). One run of the tier's Python answers both (importing vLLM takes
most of it)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tuner.serve.backends import flag_value, server_options
from tuner.vocabulary.serveargs import TABLE, ServeArgsError, canonical_argv

from ..conftest import ROOT

pytestmark = [pytest.mark.realvllm, pytest.mark.xdist_group("realvllm")]

LINES = [
    ["-tp", "2", "-q", "fp8", "--max-num-seqs", "64"],
    ["--tensor-parallel", "4", "--max-num-seq", "32", "--gpu-memory-util=0.85", "--max-model-len", "16k"],
    ["--max_num_seqs", "16", "--max_model_len=8192", "--enable_prefix_caching", "--block-size", "128"],
    ["--device-memory-utilization", "0.7", "--no-enable-prefix", "--enforce-eager"],
    ["--max-num-seqs", "8", "--max-num-seq", "24", "--max-model-len", "-1", "--kv-cache-dtype", "fp8"],
    ["--speculative-config.method", "mtp", "--speculative_config.num_speculative_tokens", "2",
     "--max-num-batched-tokens", "8K"],
    ["-sc", '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}', "-tp=2"],
    ["--hf-overrides.rope_scaling.factor", "4.0", "--hf-overrides.rope_scaling.rope_type", "yarn",
     "--limit-mm-per-prompt.image", "2", "--mamba-cache-dtype", "float32"],
    ["--spec-method", "mtp", "--spec-tokens", "2", "--num-gpu-blocks-override", "1000"],
    ["--max", "8"],
    ["--enable-p"],
    ["--max-num-seqs"],
]

# run by the tier's Python: each line through vLLM's own parser; its options, or the error it prints
VLLM_SIDE = r"""
import contextlib, importlib.util, io, json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

spec = importlib.util.spec_from_file_location("vllm_serve_flags", sys.argv[3])
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
table = tool.flags()["flags"]   # every option string of this vLLM's parser, as the tool writes the table
names = json.loads(sys.argv[2])
defaults = vars(make_arg_parser(FlexibleArgumentParser()).parse_args([]))
out = []
for line in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = vars(make_arg_parser(FlexibleArgumentParser()).parse_args(line))
        out.append({k: ns[k] for k in names if k in ns and ns[k] != defaults.get(k)})
    except SystemExit:
        out.append({"error": err.getvalue().strip().splitlines()[-1]})
print(json.dumps({"lines": out, "table": table}, default=str))
"""

DICTS = ("speculative_config", "limit_mm_per_prompt", "hf_overrides")


def _ours(line: list[str]) -> dict:
    try:
        got = server_options(line)
        overrides = flag_value(canonical_argv(line), "--hf-overrides")   # read apart: the model is read with it
    except ServeArgsError as exc:
        return {"error": str(exc)}
    if overrides is not None:
        got["hf_overrides"] = overrides
    return {k: json.loads(v) if k in DICTS and isinstance(v, str) else v for k, v in got.items()}


@pytest.fixture(scope="module")
def vllm_side(vllm_env) -> dict:
    names = sorted({*_ours(LINES[0]), "max_num_seqs", "max_model_len", "block_size", "max_num_batched_tokens",
                    "gpu_memory_utilization", "enforce_eager", "enable_prefix_caching", "tensor_parallel_size",
                    "num_gpu_blocks_override", "kv_cache_dtype", "quantization", "limit_mm_per_prompt",
                    "speculative_config", "spec_method", "spec_tokens", "mamba_cache_dtype", "hf_overrides"})
    run = subprocess.run([str(vllm_env.python), "-c", VLLM_SIDE, json.dumps(LINES), json.dumps(names),
                          str(ROOT / "tools" / "vllm_serve_flags.py")], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_shipped_flag_table_is_vllms_own_parser(vllm_side):
    assert json.loads(TABLE.read_text())["flags"] == vllm_side["table"]


def test_server_args_are_read_as_vllms_own_parser_reads_them(vllm_side):
    for line, vllm in zip(LINES, vllm_side["lines"]):
        ours = _ours(line)
        if "error" in vllm:
            assert "error" in ours, (line, vllm, ours)
            words = "ambiguous option" if "ambiguous" in vllm["error"] else "expected one argument"
            assert words in vllm["error"] and words in ours["error"], (line, vllm, ours)
            continue
        assert "error" not in ours, (line, vllm, ours)
        # vLLM leaves hf_overrides and --max-model-len's value as text for later; compare what they say
        vllm = {k: (json.loads(v) if k in DICTS and isinstance(v, str) else v) for k, v in vllm.items()}
        assert ours == vllm, line
