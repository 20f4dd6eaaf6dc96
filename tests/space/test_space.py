"""Search-space files: validation messages, conditions, derived values, release checks, shipped spaces."""

from pathlib import Path

import optuna
import pytest

from tuner.space.schema import SearchSpace, SpaceError

from ..conftest import ROOT

SPACES = sorted((ROOT / "search_spaces").glob("*.yaml"))


def space(**overrides):
    data = {
        "name": "t",
        "server": {"max_model_len": 2048, "block_size": 128, "max_num_batched_tokens": 4096},
        "env": {"VLLM_EXPONENTIAL_BUCKETING": "false"},
        "parameters": {
            "max_num_seqs": {"type": "int", "low": 16, "high": 64, "step": 16},
            "VLLM_GRAPH_RESERVED_MEM": {"type": "float", "low": 0.02, "high": 0.3},
        },
    }
    data.update(overrides)
    return SearchSpace.from_dict(data, source="t.yaml")


@pytest.mark.parametrize("path", SPACES, ids=[p.stem for p in SPACES])
def test_shipped_spaces_load_check_and_sample(path, tmp_path):
    sp = SearchSpace.load(path)
    if sp.fitted_parameters:  # fitted bucket counts are placed on a workload (tests/space/test_fitted_space.py)
        from types import SimpleNamespace

        from tuner.load.workload import RandomWorkload
        from tuner.space.fitted import bind_fitted

        bind_fitted(sp, SimpleNamespace(release=sp.release, workload=RandomWorkload(512, 64, num_prompts=50),
                                        load=SimpleNamespace(max_concurrency=16)), tmp_path)
    if sp.release:  # Gaudi spaces name their release; a generic vLLM space (vllm-cpu) has none
        sp.check_release(sp.release)
    else:
        assert not any(p.key.startswith("VLLM_") and "BUCKET" in p.key for p in sp.parameters)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(5):
        trial = study.ask()
        settings = sp.suggest(trial)
        # Every searched value landed in the env or the server options.
        for p in sp.parameters:
            if p.name in settings.params:
                where = {"env": settings.env, "fitted": settings.fitted}.get(p.target, settings.server)
                assert p.key in where
        if settings.fitted:
            assert Path(settings.env["VLLM_BUCKETING_FROM_FILE"]).is_file()
        study.tell(trial, 0.0)


def test_targets_are_inferred_and_values_rendered_for_env():
    sp = space(parameters={
        "max_num_seqs": {"type": "int", "low": 16, "high": 64, "step": 16},
        "enforce_eager": {"type": "bool"},
        "VLLM_GRAPH_RESERVED_MEM": {"type": "float", "low": 0.02, "high": 0.3},
        "seq_step": {"env": "VLLM_PROMPT_SEQ_BUCKET_STEP", "type": "categorical", "choices": [128, 256]},
    })
    s = sp.settings_for({"max_num_seqs": 32, "enforce_eager": True, "VLLM_GRAPH_RESERVED_MEM": 0.1, "seq_step": 256})
    assert s.server == {"max_model_len": 2048, "block_size": 128, "max_num_batched_tokens": 4096,
                        "max_num_seqs": 32, "enforce_eager": True}
    assert s.env == {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_GRAPH_RESERVED_MEM": "0.1",
                     "VLLM_PROMPT_SEQ_BUCKET_STEP": "256"}


def test_conditions_skip_parameters_define_by_run():
    sp = space(parameters={
        "VLLM_EXPONENTIAL_BUCKETING": {"type": "categorical", "choices": ["true", "false"]},
        "VLLM_DECODE_BS_BUCKET_STEP": {"type": "categorical", "choices": [8, 16],
                                       "when": {"VLLM_EXPONENTIAL_BUCKETING": "false"}},
    }, env={})
    study = optuna.create_study()
    study.enqueue_trial({"VLLM_EXPONENTIAL_BUCKETING": "true"})
    study.enqueue_trial({"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_DECODE_BS_BUCKET_STEP": 16})
    t1 = study.ask()
    s1 = sp.suggest(t1)
    assert "VLLM_DECODE_BS_BUCKET_STEP" not in s1.env and set(t1.params) == {"VLLM_EXPONENTIAL_BUCKETING"}
    study.tell(t1, 0)
    s2 = sp.suggest(study.ask())
    assert s2.env["VLLM_DECODE_BS_BUCKET_STEP"] == "16"


def test_derived_values_use_sampled_and_fixed_names():
    sp = space(derived={"VLLM_DECODE_BLOCK_BUCKET_MAX": "max_num_seqs * ceil(max_model_len / block_size)",
                        "VLLM_DECODE_BS_BUCKET_MAX": "min(max_num_seqs, 48)"})
    s = sp.settings_for({"max_num_seqs": 64, "VLLM_GRAPH_RESERVED_MEM": 0.1})
    assert s.env["VLLM_DECODE_BLOCK_BUCKET_MAX"] == str(64 * 16)
    assert s.env["VLLM_DECODE_BS_BUCKET_MAX"] == "48"


def test_token_counts_are_written_as_vllms_cli_takes_them():
    # 32k = 32,000, 8K = 8,192, auto = -1 (the server fits the length to its KV cache): integers from here on
    sp = space(server={"max_model_len": "32k", "block_size": 128, "max_num_batched_tokens": "8K"})
    assert (sp.server["max_model_len"], sp.server["max_num_batched_tokens"]) == (32000, 8192)
    assert space(server={"max_model_len": "auto"}).server["max_model_len"] == -1
    choices = space(server={"block_size": 128}, parameters={
        "max_model_len": {"type": "categorical", "choices": ["8k", "16K", 4096]},
        "max_num_seqs": {"type": "int", "low": 16, "high": 64}})
    assert next(p for p in choices.parameters if p.name == "max_model_len").choices == (8000, 16384, 4096)


@pytest.mark.parametrize(
    "overrides,needle",
    [
        ({"parameters": {"max_num_seqs": {"type": "int", "low": 64, "high": 16}}},
         "'max_num_seqs': low=64 is greater than high=16"),
        ({"parameters": {"max_num_seqs": {"type": "integer", "low": 1, "high": 2}}},
         "'max_num_seqs': type must be one of"),
        ({"parameters": {"foo": {"type": "int", "low": 1, "high": 2}}}, "'foo': say what it sets"),
        ({"parameters": {"x": {"server": "max_num_sequences", "type": "int", "low": 1, "high": 2}}},
         "unknown server option 'max_num_sequences'"),
        ({"parameters": {"VLLM_X": {"type": "categorical", "choices": []}}}, "'VLLM_X': categorical needs"),
        ({"parameters": {"VLLM_X": {"type": "float", "low": 0, "high": 1, "log": True}}}, "log scale needs low > 0"),
        ({"parameters": {"VLLM_EXPONENTIAL_BUCKETING": {"type": "bool"}}}, "also fixed under env"),
        ({"parameters": {"VLLM_X": {"type": "bool", "when": {"nothing": 1}}}}, "'when' refers to 'nothing'"),
        ({"derived": {"VLLM_Y": "max_num_seqs * unknown_name"}}, "unknown name 'unknown_name'"),
        ({"derived": {"VLLM_Y": "__import__('os')"}}, "derived 'VLLM_Y'"),
        ({"parameters": {}}, "'parameters' must be a non-empty mapping"),
        ({"server": {"max_model_len": "long"}}, "server.max_model_len: 'long' is not a token count"),
        ({"server": {"max_model_len": 4096, "max_num_batched_tokens": "2.5K"}},
         "server.max_num_batched_tokens: '2.5K': decimals are not allowed with binary suffixes"),
        ({"server": {"max_model_len": "auto", "block_size": 128},
          "derived": {"VLLM_DECODE_BLOCK_BUCKET_MAX": "max_num_seqs * ceil(max_model_len / block_size)"}},
         "derived VLLM_DECODE_BLOCK_BUCKET_MAX read(s) max_model_len, which auto leaves to the server's KV cache"),
        ({"release": "fork-0.1"}, "unknown release profile 'fork-0.1'"),
        ({"typo": 1}, "unknown top-level key(s): typo"),
    ],
)
def test_validation_errors_name_file_parameter_and_problem(overrides, needle):
    with pytest.raises(Exception) as info:
        sp = space(**overrides)
        sp.settings_for({"max_num_seqs": 16, "VLLM_GRAPH_RESERVED_MEM": 0.1})
    assert needle in str(info.value)
    assert isinstance(info.value, (SpaceError, ValueError))


def test_missing_and_malformed_files(tmp_path: Path):
    with pytest.raises(SpaceError, match="not found"):
        SearchSpace.load(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("parameters: [unclosed")
    with pytest.raises(SpaceError, match="bad.yaml: not valid YAML"):
        SearchSpace.load(bad)


def test_release_check_drops_variables_the_release_ignores():
    # fork-1.17 has no decode block dimension and no exponential switch.
    sp = space(release="fork-1.17", env={}, parameters={
        "max_num_seqs": {"type": "int", "low": 16, "high": 64, "step": 16},
        "VLLM_DECODE_BLOCK_BUCKET_STEP": {"type": "categorical", "choices": [128, 256]},
        "VLLM_DECODE_SEQ_BUCKET_STEP": {"type": "categorical", "choices": [128, 256]},
    })
    notes = sp.check_release("fork-1.17")
    assert [p.name for p in sp.parameters] == ["max_num_seqs", "VLLM_DECODE_SEQ_BUCKET_STEP"]
    assert len(notes) == 1 and "VLLM_DECODE_BLOCK_BUCKET_STEP" in notes[0]


def test_release_check_knows_exponential_ignores_linear_steps():
    sp = space(release="fork-1.22", env={}, parameters={
        "max_num_seqs": {"type": "int", "low": 16, "high": 64, "step": 16},
        "VLLM_DECODE_BS_BUCKET_STEP": {"type": "categorical", "choices": [8, 16]},
    })
    notes = sp.check_release("fork-1.22")
    assert [p.name for p in sp.parameters] == ["max_num_seqs"]
    assert "exponential" in notes[0]
    # The same parameter under an explicit linear switch is kept.
    sp2 = space(release="fork-1.22", env={"VLLM_EXPONENTIAL_BUCKETING": "false"}, parameters={
        "VLLM_DECODE_BS_BUCKET_STEP": {"type": "categorical", "choices": [8, 16]},
    })
    assert sp2.check_release("fork-1.22") == []


def test_grid_values_discretise_every_type():
    sp = space(parameters={
        "max_num_seqs": {"type": "int", "low": 16, "high": 64, "step": 16},
        "VLLM_GRAPH_RESERVED_MEM": {"type": "float", "low": 0.1, "high": 0.4},
        "enforce_eager": {"type": "bool"},
    })
    grid = sp.grid(levels=4)
    assert grid["max_num_seqs"] == [16, 32, 48, 64]
    assert grid["VLLM_GRAPH_RESERVED_MEM"] == [0.1, 0.2, 0.3, 0.4]
    assert grid["enforce_eager"] == [False, True]
