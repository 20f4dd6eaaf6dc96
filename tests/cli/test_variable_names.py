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


# --- what a release declares (tuner/buckets/declared.py) and the values it can parse ---------------------

GAUDI_MAIN = ["buckets", "--release", "gaudi-main", "--max-num-seqs", "16", "--max-model-len", "1024",
              "--max-num-batched-tokens", "2048", "--num-hpu-blocks", "100"]
# Real variables vllm-gaudi main declares (features.py, envs.py) that a production env file sets.
PRODUCTION = ["VLLM_MOE_CHUNK=64,128", "VLLM_ROW_PARALLEL_CHUNKS=4", "VLLM_T_COMPILE_FULLGRAPH=true",
              "VLLM_HPU_FSDPA_SLICE_ENABLED=true", "VLLM_HPU_FSDPA_SLICE_SEQ_LEN_THLD=8192",
              "VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY=1"]


def test_buckets_takes_the_variables_gaudi_main_declares(capsys):
    code, out, err = run([*GAUDI_MAIN, *[a for v in PRODUCTION for a in ("--env", v)], "--json"], capsys)
    assert code == 0, err
    assert not [w for w in json.loads(out)["warnings"] if "VLLM_" in w and "read" in w]


@pytest.mark.parametrize("extra", [[], ["--allow-unknown"]])
def test_a_value_upstream_cannot_parse_is_refused_before_any_bucket(extra, capsys):
    code, out, err = run([*GAUDI_MAIN, "--env", "VLLM_ROW_PARALLEL_CHUNKS=x", *extra], capsys)
    assert code == 2 and out == ""
    assert ("error: --env VLLM_ROW_PARALLEL_CHUNKS=x: the server would fail at start-up: gaudi-main parses it as "
            "an integer (vllm_gaudi/extension/features.py): ValueError: invalid literal for int() with base 10: "
            "'x'") in err


def test_compare_reads_a_production_env_file_of_declared_variables(tmp_path, capsys):
    f = tmp_path / "prod.env"
    f.write_text("".join(f"export {v}\n" for v in PRODUCTION))
    code, out, err = run(["compare", "--release", "gaudi-0.26.0", "gaudi-main", "--max-model-len", "2048",
                          "--max-num-seqs", "16", "--env-file", str(f), "--json"], capsys)
    assert code == 0, err
    warnings = json.loads(out)["name_warnings"]
    # VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY is new in main: the existing warning for another release's variable
    assert warnings == [f"--env-file {f}: VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY: gaudi-0.26.0 does not read it "
                        "(gaudi-main does)"]
    f.write_text("VLLM_MOE_CHUNK=64;128\n")
    code, out, err = run(["compare", "--release", "gaudi-main", "fork-1.21.2", "--max-model-len", "2048",
                          "--env-file", str(f)], capsys)
    assert code == 2 and "VLLM_MOE_CHUNK=64;128: the server would fail at start-up: gaudi-main parses it as " \
                         "comma-separated integers" in err


def test_an_undeclared_name_in_an_env_file_is_still_refused(tmp_path, capsys):
    f = tmp_path / "prod.env"
    f.write_text("VLLM_ROW_PARALLEL_CHUNK=4\n")
    code, _, err = run([*RELEASES, "--env-file", str(f)], capsys)
    assert code == 2
    assert "VLLM_ROW_PARALLEL_CHUNK: no release reads this variable; did you mean VLLM_ROW_PARALLEL_CHUNKS?" in err


def test_calc_env_output_with_declared_variables_reads_back(tmp_path, capsys):
    code, out, _ = run(["calc", "--release", "gaudi-main", "--format", "env", "--num-hpu-blocks", "2000"], capsys)
    assert code == 0
    f = tmp_path / "calc.env"
    f.write_text(out + "".join(f"export {v}\n" for v in PRODUCTION))
    code, out, err = run(["compare", "--release", "gaudi-0.26.0", "gaudi-main", "--env-file", str(f), "--json"], capsys)
    assert code == 0, err
    assert [w for w in json.loads(out)["name_warnings"] if "MM_WARMUP" not in w] == []


def test_export_keeps_the_declared_variables_of_a_trial():
    from tuner.results.export import complete_env

    trial_env = dict(v.split("=", 1) for v in PRODUCTION)
    env, _ = complete_env("gaudi-main", trial_env, {"max_num_seqs": 16, "max_model_len": 1024,
                                                    "max_num_batched_tokens": 2048, "block_size": 128}, 500)
    assert {k: env[k] for k in trial_env} == trial_env


def test_a_space_is_checked_for_declared_values():
    from tuner.space.schema import SearchSpace, SpaceError

    fixed = {k: v for k, v in (v.split("=", 1) for v in PRODUCTION) if k != "VLLM_ROW_PARALLEL_CHUNKS"}
    data = {"name": "s", "release": "gaudi-main", "env": fixed,
            "parameters": {"chunks": {"type": "categorical", "choices": [1, 2, 4], "env": "VLLM_ROW_PARALLEL_CHUNKS"},
                           "max_num_seqs": {"type": "categorical", "choices": [8, 16]}}}
    space = SearchSpace.from_dict(yaml.safe_load(yaml.safe_dump(data)))
    assert space.check_release("gaudi-main") == []
    assert [p.name for p in space.parameters] == ["chunks", "max_num_seqs"]
    data["parameters"]["chunks"]["choices"] = [1, "auto"]
    with pytest.raises(SpaceError, match="parameter 'chunks': VLLM_ROW_PARALLEL_CHUNKS=auto: the server would fail"):
        SearchSpace.from_dict(data).check_release("gaudi-main")
    data["parameters"]["chunks"]["choices"] = [1]
    data["env"]["VLLM_HPU_FSDPA_SLICE_CHUNK_SIZE"] = "4k"
    with pytest.raises(SpaceError, match="env: VLLM_HPU_FSDPA_SLICE_CHUNK_SIZE=4k: the server would fail"):
        SearchSpace.from_dict(data).check_release("gaudi-main", allow_unknown=True)
