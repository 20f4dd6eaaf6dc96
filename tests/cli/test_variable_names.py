"""One resolver for variable names (tuner/buckets/names.py) on every command that takes variables:
--allow-unknown turns the refusal into a warning, a variable another release reads is a warning that
names the releases that read it, and names outside the releases' families pass untouched."""

from __future__ import annotations

import json

import pytest
import yaml

from tuner.buckets import names
from tuner.cli import main

BUCKETS = ["buckets", "--release", "fork-1.17", "--max-num-seqs", "16", "--max-model-len", "1024",
           "--max-num-batched-tokens", "2048", "--num-hpu-blocks", "100"]
RELEASES = ["compare", "--release", "fork-1.21.2", "gaudi-main", "--max-model-len", "2048", "--max-num-seqs", "16"]


def run(args, capsys) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_typo_is_refused_with_the_closest_name():
    with pytest.raises(names.UnknownVariableError, match="did you mean VLLM_DECODE_BS_BUCKET_STEP"):
        names.check_names(["VLLM_DECODE_BS_BUCKET_STPE"], "fork-1.21.2", where="--env")


def test_allow_unknown_passes_it_on_with_a_warning(capsys):
    code, out, _ = run([*BUCKETS, "--env", "VLLM_DECODE_BS_BUCKET_STPE=16", "--allow-unknown"], capsys)
    assert code == 0
    assert "warning: --env VLLM_DECODE_BS_BUCKET_STPE: no release reads this variable; did you mean" in out


def test_another_releases_variable_names_the_releases_that_read_it(capsys):
    code, out, _ = run([*BUCKETS, "--env", "VLLM_DECODE_BLOCK_BUCKET_STEP=256"], capsys)
    assert code == 0
    assert ("warning: --env VLLM_DECODE_BLOCK_BUCKET_STEP: fork-1.17 does not read it (fork-1.18 to gaudi-main do; "
            "fork-1.17 reads VLLM_DECODE_SEQ_BUCKET_STEP instead)") in out


def test_names_of_other_components_pass(capsys):
    assert names.check_names(["HF_HUB_OFFLINE", "HABANA_VISIBLE_MODULES", "VLLM_USE_V1"], "fork-1.21.2",
                             where="--env") == []


def test_compare_env_file_warns_in_text_and_json(tmp_path, capsys):
    f = tmp_path / "best.env"
    f.write_text("VLLM_DECODE_SEQ_BUCKET_STEP=256\nVLLM_PROMPT_SEQ_BUCKET_STEP=256\n")
    code, out, _ = run([*RELEASES, "--env-file", str(f), "--json"], capsys)
    assert code == 0
    warnings = json.loads(out)["name_warnings"]
    assert len(warnings) == 2 and all("VLLM_DECODE_SEQ_BUCKET_STEP" in w and "fork-1.17 does" in w for w in warnings)
    code, out, _ = run([*RELEASES, "--env-file", str(f)], capsys)
    assert code == 0 and "warning: --env-file" in out and "gaudi-main does not read it" in out


def test_a_space_with_an_unknown_fixed_variable_is_refused_unless_allowed():
    from tuner.space.schema import SearchSpace, SpaceError

    data = {"name": "s", "release": "fork-1.21.2", "env": {"VLLM_EXPONENTIAL_BUCKETNG": "false"},
            "parameters": {"max_num_seqs": {"type": "categorical", "choices": [8, 16]}}}
    with pytest.raises(SpaceError, match="did you mean VLLM_EXPONENTIAL_BUCKETING"):
        SearchSpace.from_dict(yaml.safe_load(yaml.safe_dump(data))).check_release("fork-1.21.2")
    notes = SearchSpace.from_dict(data).check_release("fork-1.21.2", allow_unknown=True)
    assert any("VLLM_EXPONENTIAL_BUCKETNG" in n and "--allow-unknown" in n for n in notes)


def test_every_variable_a_shipped_space_sets_is_known():
    from tuner.space.schema import SearchSpace

    from ..conftest import ROOT

    for path in sorted((ROOT / "search_spaces").glob("*.yaml")):
        space = SearchSpace.load(path)
        if space.release:
            space.check_release(space.release)  # raises on an unknown name
