"""`bucket-tuner fit` end to end: curves, the bucket file vllm-gaudi reads, linear fallbacks, bad input."""

from __future__ import annotations

import json

import pytest

from tuner.cli import main
from tuner.load.trace import TraceWorkload
from tuner.load.workload import RandomWorkload
from tuner.space.fit import fit_workload
from tuner.space.fit.bucketfile import BucketFileError, format_bucket_file, parse_bucket_file
from tuner.space.fit.quantize import expected_waste
from tuner.space.fit.shapes import decode_block_totals, prompt_lengths


def test_bucket_file_round_trip_in_upstreams_format():
    text = format_bucket_file([1, 2], [256, 1024], [(16, [40, 80]), (64, [200])], header=["demo"])
    prompt, decode = parse_bucket_file(text)
    assert prompt == [(1, 256, 0), (1, 1024, 0), (2, 256, 0), (2, 1024, 0)]
    assert decode == [(16, 1, 40), (16, 1, 80), (64, 1, 200)]
    # the sample file shipped with vllm-gaudi's file strategy: 1 + 6 prompt buckets, 3 decode buckets
    sample = "# Buckets:\n(1, 2048, 0)\n(1, [256, 512], [0, 4, 8])\n\n(64, 1, 1024)\n(32, 1, 512)\n(1, 1, 256)\n"
    prompt, decode = parse_bucket_file(sample)
    assert len(prompt) == 7 and decode == [(1, 1, 256), (32, 1, 512), (64, 1, 1024)]


@pytest.mark.parametrize("line", ["(1, 2)", "[1, 2, 3]", "(1, 'x', 0)", "import os", "(1, -5, 0)"])
def test_bucket_file_bad_lines_name_the_line(line):
    with pytest.raises(BucketFileError, match=r"f.txt:2"):
        parse_bucket_file(f"# ok\n{line}\n", "f.txt")


def test_skewed_chat_workload_fit_beats_the_best_linear_of_the_same_size(tmp_path):
    # chat traffic: mostly short prompts with a long tail
    ins = [150] * 700 + [400] * 200 + [1500] * 80 + [7000] * 20
    trace = tmp_path / "chat.jsonl"
    trace.write_text("".join(json.dumps({"input_len": n, "output_len": 100}) + "\n" for n in ins))
    wl = TraceWorkload.from_file(trace)
    fit = fit_workload(wl, block_size=128, max_concurrency=8, max_buckets=6)
    best = fit.prompt(4)
    assert best.boundaries == (256, 512, 1536, 7040)
    assert best.waste == pytest.approx(expected_waste(prompt_lengths(wl), best.boundaries))
    from tuner.space.fit import closest_linear
    linear = closest_linear(fit.prompt_linear, 4)
    assert linear is None or linear.waste > best.waste


def test_decode_totals_follow_the_batch():
    wl = RandomWorkload(input_len=256, output_len=256, num_prompts=200)
    one = decode_block_totals(wl, 1, 128, samples=500)
    eight = decode_block_totals(wl, 8, 128, samples=500)
    assert min(one) >= 3 and max(one) <= 4        # 256 prompt + up to 256 generated -> 3..4 blocks
    assert min(eight) >= 24 and max(eight) <= 32


def test_fit_command_writes_the_file_and_json(tmp_path, capsys):
    out = tmp_path / "buckets.txt"
    code = main(["fit", "--input-len", "1024", "--output-len", "128", "--range-ratio", "0.5",
                 "--max-concurrency", "8", "--prompt-buckets", "4", "--decode-buckets", "3", "-o", str(out), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    prompt, decode = parse_bucket_file(out.read_text())
    assert len(prompt) == doc["counts"]["prompt"] == 4
    assert len(decode) == doc["counts"]["decode"] == 4 * 3     # batch sizes 1, 2, 4, 8
    assert doc["env"] == {"VLLM_BUCKETING_FROM_FILE": str(out)}
    assert [r["buckets"] for r in doc["prompt"]["curve"]] == sorted(r["buckets"] for r in doc["prompt"]["curve"])
    before = out.read_bytes()
    assert main(["fit", "-o", str(out)]) == 2                 # never overwrites without --force
    assert out.read_bytes() == before


@pytest.mark.parametrize("argv,needle", [
    (["fit", "--prompt-buckets", "0"], "--prompt-buckets"),
    (["fit", "--decode-bs", "4,x"], "--decode-bs"),
    (["fit", "--dataset-path", "/nonexistent/trace.jsonl"], "/nonexistent/trace.jsonl"),
    (["fit", "--range-ratio", "1.5"], "range_ratio"),
    (["fit", "-o", "/dev/null/b.txt"], "/dev/null is a file"),  # missing folders are created; a file is no folder
])
def test_fit_bad_input_is_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_range_lines_expand_as_the_server_expands_them():
    prompt, decode = parse_bucket_file("(1, range(128, 513, 128), 0)\n([1, 2], 1, range(64, 0, -32))\n")
    assert prompt == [(1, 128, 0), (1, 256, 0), (1, 384, 0), (1, 512, 0)]
    assert decode == [(1, 1, 32), (1, 1, 64), (2, 1, 32), (2, 1, 64)]
    with pytest.raises(BucketFileError, match="b.txt:1"):
        parse_bucket_file("(1, range(0, 5, 0), 0)\n", "b.txt")      # step 0: the server cannot read it either


def test_a_fitted_file_is_read_by_the_engine_as_written(tmp_path):
    from tuner.buckets import ServerConfig, get_profile

    path = tmp_path / "b.txt"
    path.write_text(format_bucket_file([1], [256, 1024], [(8, [16, 40]), (16, [80])]))
    cfg = ServerConfig(block_size=128, max_num_seqs=16, max_model_len=2048, max_num_batched_tokens=4096,
                       num_hpu_blocks=2000, env={"VLLM_BUCKETING_FROM_FILE": str(path)})
    plan = get_profile("gaudi-main").build(cfg)
    assert [tuple(b) for b in plan.prompt] == parse_bucket_file(path.read_text())[0]
    assert len(plan.decode) == 3
