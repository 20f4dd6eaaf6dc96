"""The table of variables each release declares (tuner/buckets/declared.py) and the value check built on it
(tuner/buckets/envcheck.py, names.check_values): a declared name is known, a value the release cannot parse
is refused with upstream's own error, a flag read otherwise than it looks is a warning."""

from __future__ import annotations

import pytest

from tuner.buckets import envcheck, names, profiles
from tuner.buckets.declared import DECLARED, SOURCES

# The families a maintainer found refused although vllm-gaudi main declares them (features.py, envs.py).
GAUDI_MAIN_FAMILIES = {
    "VLLM_MOE_CHUNK": "64,128",
    "VLLM_ROW_PARALLEL_CHUNKS": "4",
    "VLLM_T_COMPILE_FULLGRAPH": "true",
    "VLLM_T_COMPILE_DYNAMIC_SHAPES": "false",
    "VLLM_T_COMPILE_REGIONAL_COMPILATION": "1",
    "VLLM_HPU_FSDPA_SLICE_ENABLED": "true",
    "VLLM_HPU_FSDPA_SLICE_SEQ_LEN_THLD": "8192",
    "VLLM_HPU_FSDPA_SLICE_CHUNK_SIZE": "4096",
    "VLLM_HPU_FSDPA_SLICE_WITH_GRAPH_BREAKS": "false",
    "VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY": "1",
}


def test_every_row_names_a_profile_a_parser_and_its_upstream_file():
    known_parsers = ("int", "float", "bool-int", "list:", "choice:", "list-choice:", "flag:", "flag-lower:",
                     "flag-exact:", "str")
    assert set(SOURCES) == set(profiles())
    for name, releases, parser, _default, source in DECLARED:
        assert name.startswith(("VLLM_", "PT_HPU_")), name
        assert releases and set(releases) <= set(profiles()), (name, releases)
        assert parser.startswith(known_parsers), (name, parser)
        assert source.startswith(("vllm/", "vllm_hpu_extension/", "vllm_gaudi/")) and source.endswith(".py")
    # one row per (name, release): a release parses a name one way
    pairs = [(name, r) for name, releases, *_ in DECLARED for r in releases]
    assert len(pairs) == len(set(pairs))


def test_what_upstream_declares_is_recorded_as_it_parses_it():
    rows = {(name, r): (parser, default) for name, releases, parser, default, _ in DECLARED for r in releases}
    # vllm_gaudi/extension/features.py at main: Value('row_parallel_chunks', 1, env_var_type=int)
    assert rows["VLLM_ROW_PARALLEL_CHUNKS", "gaudi-main"] == ("int", "1")
    assert rows["VLLM_MOE_CHUNK", "gaudi-main"] == ("list:int", "")
    # a Value without a type is read with the extension's boolean
    assert rows["VLLM_T_COMPILE_FULLGRAPH", "gaudi-main"] == ("flag:true,t,1,yes,y,on", "false")
    assert rows["VLLM_BUCKETING_STRATEGY", "gaudi-main"] == ("choice:exp,lin,pad", "exp")
    # vllm_gaudi/envs.py: .strip().lower() in ("1", "true")
    assert rows["VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY", "gaudi-main"] == ("flag-lower:1,true", "false")
    # the fork's vllm/envs.py: bool(int(os.getenv(...)))
    assert rows["VLLM_USE_RAY_COMPILED_DAG", "fork-1.22"][0] == "bool-int"
    assert ("VLLM_ROW_PARALLEL_CHUNKS", "fork-1.22") not in rows


@pytest.mark.parametrize("name", sorted(GAUDI_MAIN_FAMILIES))
def test_the_named_families_are_known_and_read_by_gaudi_main(name):
    assert name in names.known_variables()
    assert name in names.release_variables("gaudi-main")
    assert names.check_names({name: GAUDI_MAIN_FAMILIES[name]}, "gaudi-main", where="--env") == []


@pytest.mark.parametrize("allow_unknown", [False, True])
def test_a_value_the_release_cannot_parse_is_refused_with_its_own_error(allow_unknown):
    with pytest.raises(names.BadValueError) as info:
        names.check_names({"VLLM_ROW_PARALLEL_CHUNKS": "x"}, "gaudi-main", where="--env", allow_unknown=allow_unknown)
    text = str(info.value)
    assert text.startswith("--env VLLM_ROW_PARALLEL_CHUNKS=x: the server would fail at start-up")
    assert "as an integer" in text and "invalid literal for int() with base 10: 'x'" in text
    assert info.value.variable == "VLLM_ROW_PARALLEL_CHUNKS"


@pytest.mark.parametrize("name, value, words", [
    ("VLLM_MOE_CHUNK", "64,big", "invalid literal for int() with base 10: 'big'"),
    ("VLLM_MOE_CHUNK", "", "invalid literal for int() with base 10: ''"),  # ''.split(',') == ['']
    ("VLLM_BUCKETING_STRATEGY", "exponential", "exponential is not in allowed options: [exp, lin, pad]!"),
    ("VLLM_HPU_FSDPA_SLICE_CHUNK_SIZE", "4k", "invalid literal for int()"),
    ("VLLM_GRAPH_RESERVED_MEM", "10%", "could not convert string to float: '10%'"),
])
def test_upstream_parsers_fail_where_upstream_fails(name, value, words):
    with pytest.raises(names.BadValueError, match="the server would fail at start-up") as info:
        names.check_values({name: value}, "gaudi-main", where="--env")
    assert words in str(info.value)


def test_values_upstream_accepts_pass():
    ok = {"VLLM_ROW_PARALLEL_CHUNKS": " 8 ", "VLLM_MOE_CHUNK": "1,2, 3", "VLLM_GRAPH_RESERVED_MEM": "0.25",
          "VLLM_BUCKETING_STRATEGY": "pad", "VLLM_T_COMPILE_FULLGRAPH": "TRUE"}
    assert names.check_values(ok, "gaudi-main", where="--env") == []


def test_a_value_is_judged_by_the_releases_in_question():
    # fork-1.17 does not parse VLLM_ROW_PARALLEL_CHUNKS at all: no value of it can stop that server
    assert names.check_values({"VLLM_ROW_PARALLEL_CHUNKS": "x"}, "fork-1.17", where="--env") == []
    # no release given: judged by every release that declares it
    with pytest.raises(names.BadValueError, match="gaudi-0.26.0, gaudi-main parse it as an integer"):
        names.check_values({"VLLM_ROW_PARALLEL_CHUNKS": "x"}, None, where="--env")


def test_a_flag_read_otherwise_than_it_looks_is_a_warning():
    warnings = names.check_values({"VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY": "yes"}, "gaudi-main", where="--env")
    assert warnings == ["--env VLLM_MM_WARMUP_OUTSIDE_COMPILE_ONLY=yes: gaudi-main reads it as false (true is "
                        "'1' or 'true' (any case); vllm_gaudi/envs.py)"]
    # the extension's boolean takes 'yes'
    assert names.check_values({"VLLM_T_COMPILE_FULLGRAPH": "yes"}, "gaudi-main", where="--env") == []


def test_an_undeclared_name_is_still_refused_with_a_suggestion():
    with pytest.raises(names.UnknownVariableError, match="no release reads this variable; did you mean "
                                                         "VLLM_ROW_PARALLEL_CHUNKS"):
        names.check_names({"VLLM_ROW_PARALEL_CHUNKS": "4"}, "gaudi-main", where="--env")


def test_a_name_only_another_release_declares_is_the_existing_warning():
    warnings = names.check_names({"VLLM_ROW_PARALLEL_CHUNKS": "4"}, "fork-1.21.2", where="--env")
    assert warnings == ["--env VLLM_ROW_PARALLEL_CHUNKS: fork-1.21.2 does not read it (gaudi-0.26.0, gaudi-main do)"]


def test_advice_keeps_what_the_release_declares():
    kept, dropped = names.keep_read(dict(GAUDI_MAIN_FAMILIES), "gaudi-main")
    assert kept == GAUDI_MAIN_FAMILIES and dropped == []


def test_parse_error_is_none_for_text_parsers():
    assert envcheck.parse_error("str", "anything") is None
    assert envcheck.parse_error("flag:true,t,1,yes,y,on", "maybe") is None
    assert envcheck.flag_value("flag-exact:!0", "") is True  # os.environ.get(N, '0') != '0'
