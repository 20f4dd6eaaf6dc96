"""`bucket-tuner buckets --bucket-file F`: the same buckets as `--env VLLM_BUCKETING_FROM_FILE=F`, on
the releases that read bucket files (vllm-gaudi v0.15.1 and later)."""

from __future__ import annotations

import json

import pytest

from tuner.cli import main

SIZES = ["--max-num-seqs", "8", "--max-model-len", "2048", "--max-num-batched-tokens", "4096",
         "--num-hpu-blocks", "500", "--json"]
FILE = "# two prompt shapes, one decode range\n(1, 256, 0)\n([1, 2], 512, 0)\n(4, 1, range(64, 257, 64))\n"


def _json(args, capsys) -> dict:
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("profile", ["gaudi-0.15.1", "gaudi-0.26.0", "gaudi-0.27.0", "gaudi-main"])
def test_bucket_file_flag_equals_the_env_variable(profile, tmp_path, capsys):
    path = tmp_path / "buckets.txt"
    path.write_text(FILE)
    by_flag = _json(["buckets", "--profile", profile, *SIZES, "--bucket-file", str(path)], capsys)
    by_env = _json(["buckets", "--profile", profile, *SIZES, "--env", f"VLLM_BUCKETING_FROM_FILE={path}"], capsys)
    plain = _json(["buckets", "--profile", profile, *SIZES], capsys)
    assert by_flag == by_env
    assert by_flag["prompt"] == [[1, 256, 0], [1, 512, 0], [2, 512, 0]]
    # The file's decode buckets, after the release's own filters (which keep at least the smallest).
    assert [4, 1, 64] in by_flag["decode"] and all(b in [[4, 1, x] for x in (64, 128, 192, 256)]
                                                   for b in by_flag["decode"])
    assert by_flag["prompt"] != plain["prompt"]


@pytest.mark.parametrize("profile", ["fork-1.21.2", "fork-1.22", "fork-1.23", "gaudi-0.10.1"])
def test_a_release_without_bucket_files_refuses_the_flag_by_name(profile, tmp_path, capsys):
    path = tmp_path / "buckets.txt"
    path.write_text(FILE)
    assert main(["buckets", "--profile", profile, *SIZES, "--bucket-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{profile} cannot read bucket files" in err and "gaudi-main" in err
