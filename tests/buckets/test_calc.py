"""The static calculator: the documented example exactly, bad inputs, and the release review."""

import json

import pytest

from tuner.buckets import calc
from tuner.cli import main

EXAMPLE_ARGS = ["calc", "--input-len", "8096", "--output-len", "1024", "--range-ratio", "0.8",
                "--bs-list", "4,8,16,32,64"]

# docs/bucketing.md section F, worked example.
EXAMPLE_VARIABLES = {
    "MAX_MODEL_LEN": 16417,
    "VLLM_PROMPT_BS_BUCKET_MIN": 1,
    "VLLM_PROMPT_BS_BUCKET_STEP": 4,
    "VLLM_PROMPT_BS_BUCKET_MAX": 64,
    "VLLM_PROMPT_SEQ_BUCKET_MIN": 128,
    "VLLM_PROMPT_SEQ_BUCKET_STEP": 128,
    "VLLM_PROMPT_SEQ_BUCKET_MAX": 16512,
    "VLLM_DECODE_BS_BUCKET_MIN": 4,
    "VLLM_DECODE_BS_BUCKET_STEP": 4,
    "VLLM_DECODE_BS_BUCKET_MAX": 64,
    "VLLM_DECODE_BLOCK_BUCKET_MIN": 128,
    "VLLM_DECODE_BLOCK_BUCKET_STEP": 128,
    "VLLM_DECODE_BLOCK_BUCKET_MAX": 8576,
}


def run_cli(capsys, args):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_documented_example_json(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE_ARGS)
    assert code == 0
    result = json.loads(out)
    assert list(result) == ["benchmark_inputs", "length_ranges", "calculated_variables"]
    assert result["benchmark_inputs"] == {
        "base_input_len": 8096,
        "base_output_len": 1024,
        "range_ratio": 0.8,
        "concurrency_list": [4, 8, 16, 32, 64],
        "bucket_size": 128,
    }
    assert result["length_ranges"] == {"min_in_len": 1620, "max_in_len": 14573, "min_out_len": 205, "max_out_len": 1844}
    # Same values and the script's order.
    assert list(result["calculated_variables"].items()) == list(EXAMPLE_VARIABLES.items())
    # The script prints with indent=4.
    assert out.startswith('{\n    "benchmark_inputs": {\n        "base_input_len": 8096,')


def test_documented_example_env(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE_ARGS + ["--format", "env"])
    assert code == 0
    # MAX_MODEL_LEN is vLLM's --max-model-len flag, not a variable: it goes in the flags header.
    assert out.splitlines() == ["# vllm serve flags: --max-model-len 16417"] + [
        f"export {k}={v}" for k, v in EXAMPLE_VARIABLES.items() if k != "MAX_MODEL_LEN"]


def test_env_output_is_read_back_by_compare(capsys, tmp_path):
    from tuner.commands.compare import read_env_file

    code, out, _ = run_cli(capsys, EXAMPLE_ARGS + ["--format", "env", "--release", "fork-1.21.2"])
    assert code == 0
    (tmp_path / "calc.env").write_text(out)
    env, server = read_env_file(tmp_path / "calc.env")
    # the flags the review settled on: max_model_len rounded to the block size, the budget it assumed, and
    # the prompt batch its budget holds (so that no prompt bucket is skipped)
    assert server == {"max_model_len": 16512, "max_num_batched_tokens": 16512, "max_num_prefill_seqs": 1}
    assert "MAX_MODEL_LEN" not in env
    assert env["VLLM_DECODE_BLOCK_BUCKET_MAX"] == "4096"  # the first step past the 4,052 KV blocks predicted


def test_review_predicts_kv_blocks_and_warmup_with_a_band(capsys):
    code, out, _ = run_cli(capsys, ["calc", "--release", "fork-1.21.2", "--bs-list", "8,16"])
    assert code == 0
    review = json.loads(out)["release_review"]
    pred = review["prediction"]
    assert review["kv_source"] == "predicted" and review["num_hpu_blocks"] == pred["kv_blocks"] > 0
    low, high = pred["warmup_band_s"]
    assert 0 < low < pred["warmup_s"] < high
    assert review["warmup"].startswith("about ")
    code, out, _ = run_cli(capsys, ["calc", "--release", "fork-1.21.2", "--num-hpu-blocks", "300"])
    review = json.loads(out)["release_review"]
    assert review["num_hpu_blocks"] == 300 and review["kv_source"].startswith("given")


def test_review_uses_the_names_the_release_reads(capsys):
    code, out, _ = run_cli(capsys, ["calc", "--release", "fork-1.17", "--format", "env"])
    assert code == 0
    assert "export VLLM_DECODE_SEQ_BUCKET_MAX=2048" in out and "VLLM_DECODE_BLOCK_BUCKET" not in out.split("#")[1]


def test_single_batch_size_uses_itself_as_step():
    result = calc.calculate(calc.CalcInputs(input_len=1000, output_len=200, bs_list=(32,)))
    v = result["calculated_variables"]
    assert v["VLLM_PROMPT_BS_BUCKET_STEP"] == 32 and v["VLLM_DECODE_BS_BUCKET_STEP"] == 32
    assert v["MAX_MODEL_LEN"] == 1200
    assert v["VLLM_PROMPT_SEQ_BUCKET_MAX"] == 1280  # ceil(1200/128)=10 blocks
    # 32 * 10 + 256 = 576 -> rounded up to 640
    assert v["VLLM_DECODE_BLOCK_BUCKET_MAX"] == 640
    # 32 * ceil(1000/128)=8 -> 256
    assert v["VLLM_DECODE_BLOCK_BUCKET_MIN"] == 256


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--bs-list", "4,x"], "'x' is not one"),
        (["--bs-list", "8,4"], "8,4"),
        (["--bs-list", "0"], "got 0"),
        (["--range-ratio", "1.0"], "got 1.0"),
        (["--range-ratio", "-0.1"], "got -0.1"),
        (["--input-len", "0"], "--input-len"),
        (["--output-len", "-5"], "--output-len"),
        (["--bucket-size", "0"], "--bucket-size"),
        (["--release", "fork-9.99"], "fork-9.99"),
    ],
)
def test_bad_inputs_name_the_value(capsys, args, needle):
    code, out, err = run_cli(capsys, ["calc"] + args)
    assert code == 2
    assert out == ""
    assert needle in err


def test_review_on_exponential_default_release_says_values_are_ignored(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE_ARGS + ["--release", "fork-1.22"])
    assert code == 0
    review = json.loads(out)["release_review"]
    assert review["strategy"] == "exponential"
    # Exponential from 1.22 on overwrites all 12 MIN/STEP/MAX variables.
    assert len(review["ignored"]) == 12
    assert any("VLLM_EXPONENTIAL_BUCKETING=false" in n for n in review["notes"])
    assert any("16417 rounded up to 16512" in n for n in review["notes"])
    assert "--max-model-len" in review["server_flags"] and "16512" in review["server_flags"]


def test_review_on_linear_release_uses_values_and_reports_clamping(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE_ARGS + ["--release", "fork-1.21.2", "--num-hpu-blocks", "5000"])
    assert code == 0
    review = json.loads(out)["release_review"]
    assert review["strategy"] == "linear"
    assert review["ignored"] == []
    assert any("lowered from 8,576 to 5,120" in n for n in review["notes"])
    assert review["env"]["VLLM_DECODE_BLOCK_BUCKET_MAX"] == "5120"
    assert review["prompt_buckets"] > 0 and review["decode_buckets"] > 0


def test_review_env_format_stays_sourceable(capsys):
    code, out, _ = run_cli(capsys, EXAMPLE_ARGS + ["--format", "env", "--release", "fork-1.22"])
    assert code == 0
    for line in out.splitlines():
        assert line.startswith("export ") or line.startswith("# ")
    assert "# fork-1.22 ignores VLLM_PROMPT_BS_BUCKET_MIN" in out
