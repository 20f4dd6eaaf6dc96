"""Image-bucket dimensions in a search space: bucket lists and resolution sets written as YAML lists or
as the variable's text, checked as the release reads them (a bad one refused naming it), exported as
the variable's text; VLLM_MULTIMODAL_RESOLUTIONS searched only where the release reads it."""

from __future__ import annotations

import pytest

from tuner.space.schema import SearchSpace, SpaceError


def _space(param: dict | None = None, env: dict | None = None, release: str = "gaudi-0.26.0") -> SearchSpace:
    params = {"max_num_seqs": {"type": "categorical", "choices": [16, 32]}}
    if param:
        params.update(param)
    return SearchSpace.from_dict({"name": "vl", "release": release, "env": env or {}, "parameters": params})


def test_bucket_lists_and_resolution_sets_become_the_variables_text():
    space = _space({
        "VLLM_MULTIMODAL_BUCKETS": {"type": "categorical", "choices": ["", [1156, 256], "196, 256,441"]},
        "VLLM_MULTIMODAL_RESOLUTIONS": {"type": "categorical",
                                        "choices": [["1280x720", [256, 256]], [[864, 480, "1-4"], [640, 480, 2]]]},
    })
    buckets, resolutions = space.parameters[1:]
    assert buckets.choices == ("", "256,1156", "196,256,441")  # sorted as the release sorts them; "" its table
    assert resolutions.choices == ("1280x720,256x256", "864x480x1-4,640x480x2")
    settings = space.settings_for({"max_num_seqs": 16, "VLLM_MULTIMODAL_BUCKETS": "256,1156",
                                   "VLLM_MULTIMODAL_RESOLUTIONS": "1280x720,256x256"})
    assert settings.env == {"VLLM_MULTIMODAL_BUCKETS": "256,1156", "VLLM_MULTIMODAL_RESOLUTIONS": "1280x720,256x256"}
    fixed = _space(env={"VLLM_MULTIMODAL_RESOLUTIONS": [[1280, 720], "256x256x1"]})
    assert fixed.env == {"VLLM_MULTIMODAL_RESOLUTIONS": "1280x720,256x256x1"}


@pytest.mark.parametrize(("choice", "named"), [
    ([256, "abc"], "'abc' is not one"),
    ("256,abc", "invalid literal for int() with base 10: 'abc'"),
    ("256,", "invalid literal for int() with base 10: ''"),
    ("None", "'None': no bucket list at all"),
    ([0, 256], "bucket 0 is not a positive count"),
    ([256, 256], "bucket 256 is listed twice"),
    ([], "non-empty list"),
])
def test_a_bucket_list_the_release_cannot_take_is_refused_naming_the_value(choice, named):
    with pytest.raises(SpaceError) as info:
        _space({"VLLM_MULTIMODAL_BUCKETS": {"type": "categorical", "choices": [[256, 1156], choice]}})
    assert "VLLM_MULTIMODAL_BUCKETS" in str(info.value) and named in str(info.value)


@pytest.mark.parametrize(("choice", "named"), [
    ("1024x768x2x3", "Invalid VLLM_MULTIMODAL_RESOLUTIONS entry '1024x768x2x3'"),
    ([[1280, 720, "3-1"]], "Invalid count range '3-1'"),
    (["1280x"], "invalid literal for int() with base 10: ''"),
    ([[1280]], "[1280]: a resolution is"),
    ("0x720", "0x720 has a side or count below 1"),
])
def test_a_resolution_set_the_release_cannot_take_is_refused_naming_the_value(choice, named):
    with pytest.raises(SpaceError) as info:
        _space({"VLLM_MULTIMODAL_RESOLUTIONS": {"type": "categorical", "choices": [choice]}})
    assert named in str(info.value)


def test_equal_lists_other_types_and_bad_fixed_values_are_refused():
    with pytest.raises(SpaceError, match="are the same list"):
        _space({"VLLM_MULTIMODAL_BUCKETS": {"type": "categorical", "choices": [[256, 1156], "1156,256"]}})
    with pytest.raises(SpaceError, match="search it with type: categorical"):
        _space({"VLLM_MULTIMODAL_BUCKETS": {"type": "int", "low": 256, "high": 1156}})
    with pytest.raises(SpaceError, match="env: VLLM_MULTIMODAL_BUCKETS '256,x'"):
        _space(env={"VLLM_MULTIMODAL_BUCKETS": "256,x"})


def test_resolutions_are_searched_only_where_the_release_reads_them():
    param = {"VLLM_MULTIMODAL_RESOLUTIONS": {"type": "categorical", "choices": [["1280x720"], ["864x480"]]}}
    newer = _space(param)
    assert newer.check_release("gaudi-0.26.0") == [] and len(newer.parameters) == 2
    older = _space(param, release="gaudi-0.15.1")
    notes = older.check_release("gaudi-0.15.1")
    assert [p.name for p in older.parameters] == ["max_num_seqs"]
    assert any("does not read VLLM_MULTIMODAL_RESOLUTIONS" in n for n in notes)
