"""The vllm-gaudi plugin profiles (tuner/buckets/vllm_gaudi/) beyond the vector rows.

Expected values are worked out by hand from the upstream code (cited per test) or taken from the
vectors in tests/data/vectors/.
"""

from __future__ import annotations

import json
import random
import re

import pytest

from tuner.buckets import (
    DEFAULT,
    EXPONENTIAL,
    FORCED,
    IGNORED,
    LINEAR,
    PADDING_AWARE,
    USER,
    BucketConfigError,
    ServerConfig,
    get_profile,
)
from tuner.buckets.vllm_gaudi import PROFILES, _calc_fallback
from tuner.buckets.vllm_gaudi.padding_aware import padding_aware_range

from ..conftest import VECTOR_DIR
from .test_vectors import (
    _CONFIG_DUMP,
    ROW_PROFILE,
    TRUNCATED,
    assert_same_list,
    normalise_log_line,
    row_config,
)

OLD = ("gaudi-0.10.1", "gaudi-0.15.1")  # VLLM_EXPONENTIAL_BUCKETING selects
NEW = ("gaudi-0.26.0", "gaudi-main")  # VLLM_BUCKETING_STRATEGY selects
ALL = OLD + NEW
QUERY_ERA = ("gaudi-0.15.1",) + NEW  # prompt length is the QUERY dimension


def cfg(env=None, **kw) -> ServerConfig:
    base = dict(block_size=128, max_num_seqs=64, max_model_len=4096, max_num_batched_tokens=8192, num_hpu_blocks=4000)
    base.update(kw)
    return ServerConfig(env=env or {}, **base)


def setting(plan, name):
    s = plan.setting(name)
    assert s is not None, f"no setting {name}: {[x.name for x in plan.settings]}"
    return s


# ------------------------------------------------------------------------------------------ profiles

def test_profiles_registered_with_their_upstream():
    assert [p.name for p in PROFILES] == list(ALL)
    for p in PROFILES:
        assert get_profile(p.name) is p
        assert p.engine == "v1" and p.dims == 3 and p.default_strategy == EXPONENTIAL
        assert p.upstream.startswith("vllm-project/vllm-gaudi@")
    assert get_profile("gaudi-0.26.0").upstream.endswith("(b059f9c95d6a07f19eb00aa06d1ec8b87b296437)")
    assert get_profile("gaudi-0.10.1").strategies == (EXPONENTIAL, LINEAR)
    assert get_profile("gaudi-main").strategies == (EXPONENTIAL, LINEAR, PADDING_AWARE)


# -------------------------------------------------------------------------------- strategy selection

@pytest.mark.parametrize("name", OLD)
@pytest.mark.parametrize("raw,expected", [(None, EXPONENTIAL), ("true", EXPONENTIAL), ("YES", EXPONENTIAL),
                                          ("1", EXPONENTIAL), ("false", LINEAR), ("0", LINEAR), ("nope", LINEAR)])
def test_old_releases_select_with_exponential_flag(name, raw, expected):
    # config.boolean: true|t|1|yes|y|on (any case) is true, anything else false.
    env = {} if raw is None else {"VLLM_EXPONENTIAL_BUCKETING": raw}
    assert get_profile(name).select_strategy(env) == (expected, [])


@pytest.mark.parametrize("name", NEW)
def test_new_releases_select_with_strategy_variable(name):
    p = get_profile(name)
    assert p.select_strategy({}) == (EXPONENTIAL, [])
    assert p.select_strategy({"VLLM_BUCKETING_STRATEGY": "lin"}) == (LINEAR, [])
    assert p.select_strategy({"VLLM_BUCKETING_STRATEGY": "pad"}) == (PADDING_AWARE, [])
    with pytest.raises(BucketConfigError) as info:
        p.select_strategy({"VLLM_BUCKETING_STRATEGY": "linear"})
    assert info.value.variable == "VLLM_BUCKETING_STRATEGY"
    assert "linear is not in allowed options: [exp, lin, pad]!" in str(info.value)


@pytest.mark.parametrize("name", NEW)
def test_deprecated_exponential_flag_still_overrides(name):
    p = get_profile(name)
    deprecation = ("VLLM_EXPONENTIAL_BUCKETING is deprecated and will be removed in a future release. "
                   "Use VLLM_BUCKETING_STRATEGY='exp'|'lin'|'pad' instead.")
    strategy, warnings = p.select_strategy({"VLLM_BUCKETING_STRATEGY": "pad", "VLLM_EXPONENTIAL_BUCKETING": "true"})
    assert strategy == EXPONENTIAL
    overriding = ("Overriding bucketing strategy PaddingAwareBucketingStrategy with ExponentialBucketingStrategy "
                  "due to VLLM_EXPONENTIAL_BUCKETING=true")
    assert warnings == [deprecation, overriding]
    # Same strategy: only the deprecation.
    chosen = p.select_strategy({"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_BUCKETING_STRATEGY": "lin"})
    assert chosen == (LINEAR, [deprecation])
    # Anything but a true value means linear, even "pad" strategies.
    assert p.select_strategy({"VLLM_EXPONENTIAL_BUCKETING": "off", "VLLM_BUCKETING_STRATEGY": "pad"})[0] == LINEAR

    plan = p.build(cfg({"VLLM_EXPONENTIAL_BUCKETING": "1"}))
    assert plan.strategy == EXPONENTIAL
    assert plan.warnings.count(deprecation) == 1  # once among the warnings...
    assert plan.log_lines.count(deprecation) == 2  # ...but logged by both the prompt and the decode pass
    assert plan.log_lines[0] == deprecation
    assert setting(plan, "VLLM_EXPONENTIAL_BUCKETING").source == USER


@pytest.mark.parametrize("name", OLD)
def test_old_releases_reject_the_new_strategy_values(name):
    # Their config framework validates VLLM_BUCKETING_STRATEGY against its own feature choices at
    # startup (RuntimeError), although the bucketing code never reads it.
    p = get_profile(name)
    with pytest.raises(BucketConfigError) as info:
        p.build(cfg({"VLLM_BUCKETING_STRATEGY": "lin"}))
    assert info.value.variable == "VLLM_BUCKETING_STRATEGY"
    assert "lin is not in allowed options" in str(info.value)
    plan = p.build(cfg({"VLLM_BUCKETING_STRATEGY": "linear_bucketing"}))
    assert plan.strategy == EXPONENTIAL  # the old feature value does not select anything
    s = setting(plan, "VLLM_BUCKETING_STRATEGY")
    assert s.source == IGNORED and "VLLM_EXPONENTIAL_BUCKETING selects" in s.note


@pytest.mark.parametrize("name", ALL)
def test_strategy_env_round_trip_and_explicit_strategy(name):
    p = get_profile(name)
    for strategy in p.strategies:
        assert p.select_strategy(p.strategy_env(strategy))[0] == strategy
        # An explicit strategy wins over the user's own (conflicting) switches.
        env = {"VLLM_EXPONENTIAL_BUCKETING": "false" if strategy == EXPONENTIAL else "true"}
        if p.name in NEW:
            env["VLLM_BUCKETING_STRATEGY"] = "lin" if strategy != LINEAR else "exp"
        assert p.build(cfg(env), strategy).strategy == strategy
    with pytest.raises(BucketConfigError):
        p.strategy_env("bogus")


def test_padding_aware_missing_before_v020():
    with pytest.raises(BucketConfigError) as info:
        get_profile("gaudi-0.15.1").build(cfg(), PADDING_AWARE)
    assert info.value.variable == "strategy"


# ---------------------------------------------------------------------------------- bucket variables

def test_bucket_variables():
    v101 = get_profile("gaudi-0.10.1")
    assert v101.bucket_variables(EXPONENTIAL) == ("VLLM_EXPONENTIAL_BUCKETING", "VLLM_CONTIGUOUS_PA")
    lin = v101.bucket_variables(LINEAR)
    assert lin[:2] == ("VLLM_EXPONENTIAL_BUCKETING", "VLLM_CONTIGUOUS_PA") and len(lin) == 14
    assert "VLLM_PROMPT_SEQ_BUCKET_MAX" in lin and "VLLM_DECODE_BLOCK_BUCKET_MIN" in lin
    assert not any("QUERY" in v or "CTX" in v for v in lin)

    v151 = get_profile("gaudi-0.15.1").bucket_variables(LINEAR)
    assert "VLLM_PROMPT_QUERY_BUCKET_STEP" in v151 and "VLLM_PROMPT_CTX_BUCKET_MAX" in v151
    assert not any("_SEQ_" in v for v in v151)  # the deprecated fallback names are not offered
    # Exponential overwrites MIN/STEP/MAX, but these three still act.
    # v0.15.1+ also read a bucket file, in every strategy.
    assert get_profile("gaudi-0.15.1").bucket_variables(EXPONENTIAL) == (
        "VLLM_EXPONENTIAL_BUCKETING", "VLLM_CONTIGUOUS_PA", "VLLM_BUCKETING_FROM_FILE", "VLLM_PROMPT_BS_BUCKET_MAX",
        "VLLM_PROMPT_QUERY_BUCKET_MIN", "VLLM_PROMPT_CTX_BUCKET_MAX")
    assert "VLLM_BUCKETING_FROM_FILE" not in v101.bucket_variables(LINEAR)

    main = get_profile("gaudi-main")
    pad = main.bucket_variables(PADDING_AWARE)
    assert pad[:3] == ("VLLM_BUCKETING_STRATEGY", "VLLM_CONTIGUOUS_PA", "VLLM_BUCKETING_FROM_FILE")
    assert len(pad) == 3 + 5 * 5
    assert "VLLM_DECODE_BLOCK_BUCKET_PAD_PERCENT" in pad
    assert not any("PAD" in v for v in main.bucket_variables(LINEAR))
    assert "VLLM_EXPONENTIAL_BUCKETING" not in main.bucket_variables(LINEAR)  # deprecated
    with pytest.raises(BucketConfigError):
        main.bucket_variables("bogus")


# ---------------------------------------------------------------------------- settings and sources

def test_linear_settings_user_default_and_query_fallback():
    env = {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_PROMPT_SEQ_BUCKET_MAX": "1024",
           "VLLM_DECODE_BS_BUCKET_STEP": "16"}
    plan = get_profile("gaudi-0.15.1").build(cfg(env))
    assert plan.strategy == LINEAR
    q = setting(plan, "VLLM_PROMPT_QUERY_BUCKET_MAX")
    assert (q.value, q.source) == (1024, USER) and "VLLM_PROMPT_SEQ_BUCKET_MAX" in q.note
    seq = setting(plan, "VLLM_PROMPT_SEQ_BUCKET_MAX")
    assert seq.source == USER and "deprecated" in seq.note
    qmin = setting(plan, "VLLM_PROMPT_QUERY_BUCKET_MIN")
    assert (qmin.value, qmin.source) == (128, DEFAULT)
    assert setting(plan, "VLLM_DECODE_BS_BUCKET_STEP").value == 16
    # Engine-derived values.
    assert setting(plan, "max_num_prefill_seqs").value == 1
    assert setting(plan, "prefix_caching").value is True
    assert setting(plan, "VLLM_CONTIGUOUS_PA").value is False
    assert setting(plan, "num_hpu_blocks").value == 4000
    fallback = ("VLLM_PROMPT_QUERY_BUCKET_MAX not set, using VLLM_PROMPT_SEQ_BUCKET_MAX value (1024) instead. "
                "This fallback behavior is deprecated and will be removed in v0.12.0.")
    assert fallback in plan.warnings
    # The warning precedes the value line, as read_bucket_settings logs them.
    i = plan.log_lines.index(fallback)
    assert plan.log_lines[i + 1] == "VLLM_PROMPT_QUERY_BUCKET_MAX=1024 (default:8192)"
    assert max(b[1] for b in plan.prompt) == 1024


@pytest.mark.parametrize("name", QUERY_ERA)
def test_query_variable_beats_seq_fallback(name):
    p = get_profile(name)
    env = dict(p.strategy_env(LINEAR), VLLM_PROMPT_QUERY_BUCKET_MAX="2048", VLLM_PROMPT_SEQ_BUCKET_MAX="1024")
    plan = p.build(cfg(env))
    assert setting(plan, "VLLM_PROMPT_QUERY_BUCKET_MAX").value == 2048
    seq = setting(plan, "VLLM_PROMPT_SEQ_BUCKET_MAX")
    assert seq.source == IGNORED and "QUERY" in seq.note
    assert not any("fallback behavior is deprecated" in w for w in plan.warnings)


@pytest.mark.parametrize("name", ALL)
def test_exponential_marks_user_ranges_ignored_with_release_note(name):
    env = {"VLLM_PROMPT_SEQ_BUCKET_MIN": "256", "VLLM_DECODE_BLOCK_BUCKET_STEP": "256"}
    plan = get_profile(name).build(cfg(env))
    assert plan.strategy == EXPONENTIAL
    for var, value in (("VLLM_PROMPT_SEQ_BUCKET_MIN", 256), ("VLLM_DECODE_BLOCK_BUCKET_STEP", 256)):
        line = f"Using Exponential Strategy - Your configuration {var}={value} will be overwritten!"
        s = setting(plan, var)
        assert (s.value, s.source, s.note) == (value, IGNORED, line)
        assert line in plan.warnings and line in plan.log_lines
    # What exponential used instead: FORCED where it overwrote the user's variables, else DEFAULT.
    seq_label = "prompt seq" if name == "gaudi-0.10.1" else "prompt query"
    assert setting(plan, f"{seq_label} (min, step, max_warmup, limit)").source == FORCED
    assert setting(plan, "decode block (min, step, max_warmup, limit)").source == FORCED
    assert setting(plan, "decode bs (min, step, max_warmup, limit)").source == DEFAULT
    assert setting(plan, "prompt bs (min, step, max_warmup, limit)").source == DEFAULT


def test_prompt_bs_max_is_overwritten_on_paper_only_from_v0151():
    env = {"VLLM_PROMPT_BS_BUCKET_MAX": "16"}
    old = get_profile("gaudi-0.10.1").build(cfg(env))
    assert setting(old, "VLLM_PROMPT_BS_BUCKET_MAX").source == IGNORED
    assert {b[0] for b in old.prompt} == {1}  # the v0.10.1 runner passes max_num_prefill_seqs = 1
    for name in QUERY_ERA:
        plan = get_profile(name).build(cfg(env))
        s = setting(plan, "VLLM_PROMPT_BS_BUCKET_MAX")
        assert s.source == USER and "will be overwritten" in s.note and "max_num_prefill_seqs" in s.note
        assert max(b[0] for b in plan.prompt) == 16
        assert setting(plan, "max_num_prefill_seqs").value == 16


@pytest.mark.parametrize("name", QUERY_ERA)
def test_exponential_query_min_one_and_ctx_cap(name):
    p = get_profile(name)
    plan = p.build(cfg({"VLLM_PROMPT_QUERY_BUCKET_MIN": "1"}))
    assert "It's only recommended to use VLLM_PROMPT_QUERY_BUCKET_MIN=1 on the decode instance under P/D " \
           "disaggregation scenario." in plan.warnings
    assert min(b[1] for b in plan.prompt) == 1
    other = p.build(cfg({"VLLM_PROMPT_QUERY_BUCKET_MIN": "256"}))
    assert setting(other, "VLLM_PROMPT_QUERY_BUCKET_MIN").source == IGNORED
    assert min(b[1] for b in other.prompt) == 128
    # The ctx cap only acts on the long-context edge buckets.
    short = p.build(cfg({"VLLM_PROMPT_CTX_BUCKET_MAX": "4"}))
    assert setting(short, "VLLM_PROMPT_CTX_BUCKET_MAX").source == IGNORED
    long_cfg = dict(max_model_len=16384, max_num_batched_tokens=16384)
    free = p.build(cfg(**long_cfg))
    capped = p.build(cfg({"VLLM_PROMPT_CTX_BUCKET_MAX": "4"}, **long_cfg))
    assert setting(capped, "VLLM_PROMPT_CTX_BUCKET_MAX").source == USER
    assert capped.prompt != free.prompt


def test_ignored_variables_with_reasons():
    env = {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_PROMPT_QUERY_BUCKET_MAX": "512",
           "VLLM_PROMPT_CTX_BUCKET_MAX": "4", "VLLM_DECODE_BS_BUCKET_LIMIT": "3",
           "VLLM_DECODE_BS_BUCKET_PAD_MAX": "8", "VLLM_BUCKETING_FROM_FILE": "/tmp/b.txt", "VLLM_OTHER": "x"}
    plan = get_profile("gaudi-0.10.1").build(cfg(env))
    ignored = {s.name: s.note for s in plan.ignored_settings()}
    assert set(ignored) == {"VLLM_PROMPT_QUERY_BUCKET_MAX", "VLLM_PROMPT_CTX_BUCKET_MAX", "VLLM_DECODE_BS_BUCKET_LIMIT",
                            "VLLM_DECODE_BS_BUCKET_PAD_MAX", "VLLM_BUCKETING_FROM_FILE"}
    assert "VLLM_PROMPT_SEQ_BUCKET_*" in ignored["VLLM_PROMPT_QUERY_BUCKET_MAX"]
    assert "padding-aware" in ignored["VLLM_DECODE_BS_BUCKET_PAD_MAX"]
    assert "LIMIT" in ignored["VLLM_DECODE_BS_BUCKET_LIMIT"]

    lin = get_profile("gaudi-0.26.0").build(cfg({"VLLM_BUCKETING_STRATEGY": "lin", "VLLM_DECODE_BS_BUCKET_PAD_MAX": "8",
                                                 "VLLM_PROMPT_BS_BUCKET_LIMIT": "2"}))
    ignored = {s.name: s.note for s in lin.ignored_settings()}
    assert "VLLM_BUCKETING_STRATEGY=pad" in ignored["VLLM_DECODE_BS_BUCKET_PAD_MAX"]
    assert "VLLM_PROMPT_BS_BUCKET_LIMIT" in ignored
    pad = get_profile("gaudi-0.26.0").build(
        cfg({"VLLM_BUCKETING_STRATEGY": "pad", "VLLM_DECODE_BS_BUCKET_PAD_MAX": "8"}))
    assert setting(pad, "VLLM_DECODE_BS_BUCKET_PAD_MAX").source == USER


def test_exponential_ignores_linear_only_variables():
    env = {"VLLM_PROMPT_QUERY_BUCKET_STEP": "256", "VLLM_DECODE_BS_BUCKET_PAD_PERCENT": "10"}
    plan = get_profile("gaudi-main").build(cfg(env))
    assert {s.name for s in plan.ignored_settings()} == set(env)
    assert "exponential" in setting(plan, "VLLM_PROMPT_QUERY_BUCKET_STEP").note
    assert not any("will be overwritten" in w for w in plan.warnings)  # only BS/SEQ/BLOCK MIN/STEP/MAX are checked


def test_max_num_prefill_seqs_is_the_plugins_own():
    plan = get_profile("gaudi-0.26.0").build(replace_cfg(cfg(), max_num_prefill_seqs=8))
    s = setting(plan, "max_num_prefill_seqs")
    assert (s.value, s.source) == (1, FORCED) and "fork option" in s.note


def replace_cfg(c: ServerConfig, **kw) -> ServerConfig:
    from dataclasses import replace

    return replace(c, **kw)


# ------------------------------------------------------------------- prefix caching and contiguous PA

def test_v0101_follows_the_engine_prefix_caching():
    p = get_profile("gaudi-0.10.1")
    on = p.build(cfg())
    off = p.build(replace_cfg(cfg(), prefix_caching=False))
    assert on.prefix_caching and not on.contiguous_pa
    assert not off.prefix_caching and off.contiguous_pa
    assert any(b[2] > 0 for b in on.prompt) and all(b[2] == 0 for b in off.prompt)
    # Contiguous PA: the last exponential block value is num_hpu_blocks itself.
    assert max(b[2] for b in off.decode) == 4000


@pytest.mark.parametrize("name", QUERY_ERA)
def test_plugin_prefix_caching_comes_from_contiguous_pa(name):
    p = get_profile(name)
    default = p.build(cfg())
    engine_off = p.build(replace_cfg(cfg(), prefix_caching=False))
    assert engine_off.prompt == default.prompt and engine_off.decode == default.decode
    s = setting(engine_off, "prefix_caching")
    assert s.value is True and s.source == FORCED and "VLLM_CONTIGUOUS_PA" in s.note

    contiguous = p.build(cfg({"VLLM_CONTIGUOUS_PA": "true"}))
    assert contiguous.contiguous_pa and not contiguous.prefix_caching
    assert setting(contiguous, "VLLM_CONTIGUOUS_PA").source == USER
    assert max(b[2] for b in contiguous.decode) == 4000  # N closes the decode block range
    assert any(b[0] > b[2] for b in contiguous.decode) or True  # no bs <= blocks filter with contiguous PA
    assert all(b[0] <= b[2] for b in default.decode)


def test_v0151_linear_clamps_default_block_max_to_the_cache():
    # Vector 05: 256 seqs x 4096 tokens / 128 = 8192 block references > 6000 allocated blocks.
    plan = get_profile("gaudi-0.15.1").build(cfg({"VLLM_EXPONENTIAL_BUCKETING": "false"}, max_num_seqs=256,
                                                 num_hpu_blocks=6000))
    line = ("VLLM_DECODE_BLOCK_BUCKET_MAX=8192 is higher than max_blocks=6000. Your configuration "
            "VLLM_DECODE_BLOCK_BUCKET_MAX=8192 will be overwritten to VLLM_DECODE_BLOCK_BUCKET_MAX=6000")
    assert line in plan.warnings and line in plan.log_lines
    s = setting(plan, "VLLM_DECODE_BLOCK_BUCKET_MAX")
    assert (s.value, s.source) == (6000, DEFAULT)
    user = get_profile("gaudi-0.15.1").build(cfg({"VLLM_EXPONENTIAL_BUCKETING": "false",
                                                  "VLLM_DECODE_BLOCK_BUCKET_MAX": "9000"}))
    assert setting(user, "VLLM_DECODE_BLOCK_BUCKET_MAX").source == FORCED
    # v0.26 keeps block references above N without contiguous PA.
    v26 = get_profile("gaudi-0.26.0").build(
        cfg({"VLLM_BUCKETING_STRATEGY": "lin", "VLLM_DECODE_BLOCK_BUCKET_MAX": "9000"}))
    assert setting(v26, "VLLM_DECODE_BLOCK_BUCKET_MAX").source == USER
    assert "Decode bucket config (min, step, max_warmup) bs:[1, 32, 64], blocks:[1, 128, 9000]" in v26.log_lines
    # ... and then caps each bucket at bs * ceil(max_model_len / block_size) references.
    assert max(b[2] for b in v26.decode) == 64 * 32


def test_main_clamps_exponential_decode_blocks_to_three_times_the_cache():
    c = cfg(max_num_seqs=256, max_model_len=32768, num_hpu_blocks=1000)
    v26 = get_profile("gaudi-0.26.0").build(c)
    main = get_profile("gaudi-main").build(c)
    # ceil(32768/128) * 256 = 65536 worst-case block references; main bounds them at 3 * 1000.
    # limit: ceil(log2 65536) + 1 = 17, plus ceil(log2(65536 / 3000)) + 1 = 6 for the range beyond 3N.
    assert setting(v26, "decode block (min, step, max_warmup, limit)").value == "[1, 256, 65536, 23]"
    assert setting(main, "decode block (min, step, max_warmup, limit)").value == "[1, 256, 3000, 13]"
    assert max(b[2] for b in main.decode) <= 3000 < max(b[2] for b in v26.decode)


# ------------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("name", ALL)
def test_non_integer_variable(name):
    with pytest.raises(BucketConfigError) as info:
        get_profile(name).build(cfg({"VLLM_DECODE_BS_BUCKET_STEP": "16.0"}))
    assert info.value.variable == "VLLM_DECODE_BS_BUCKET_STEP"
    assert "'16.0' is not an integer" in str(info.value)


def test_non_integer_in_a_variable_the_release_does_not_parse():
    # v0.10.1 has no QUERY variables: its config never parses them.
    plan = get_profile("gaudi-0.10.1").build(cfg({"VLLM_PROMPT_QUERY_BUCKET_MAX": "lots"}))
    s = setting(plan, "VLLM_PROMPT_QUERY_BUCKET_MAX")
    assert (s.value, s.source) == ("lots", IGNORED)
    # From v0.15.1 the config framework parses every bucket flag at startup, used or not.
    with pytest.raises(BucketConfigError):
        get_profile("gaudi-0.26.0").build(cfg({"VLLM_PROMPT_BS_BUCKET_PAD_MAX": "x"}))


@pytest.mark.parametrize("name", ALL)
def test_min_greater_than_max(name):
    p = get_profile(name)
    with pytest.raises(BucketConfigError) as info:
        p.build(cfg({"VLLM_DECODE_BS_BUCKET_MIN": "64", "VLLM_DECODE_BS_BUCKET_MAX": "32"}), LINEAR)
    assert info.value.variable == "VLLM_DECODE_BS_BUCKET_MIN"
    assert "Min. batch size cannot be greater than max. batch size" in str(info.value)


def test_padding_aware_assertions():
    p = get_profile("gaudi-0.26.0")
    with pytest.raises(BucketConfigError) as info:
        p.build(cfg({"VLLM_DECODE_BS_BUCKET_PAD_PERCENT": "60"}), PADDING_AWARE)
    assert info.value.variable == "VLLM_DECODE_BS_BUCKET_PAD_PERCENT"
    assert "between 0 and 50" in str(info.value)
    with pytest.raises(BucketConfigError) as info:
        p.build(cfg({"VLLM_PROMPT_BS_BUCKET_MIN": "4", "VLLM_PROMPT_BS_BUCKET_MAX": "2"}), PADDING_AWARE)
    assert "bucket_min cannot be greater than bucket_max" in str(info.value)


ADJUST_HINT = "Please adjust the bucketing configuration according to README"


@pytest.mark.parametrize("name,hint", [("gaudi-0.15.1", "Please use default exponential bucketing"),
                                       ("gaudi-0.26.0", ADJUST_HINT), ("gaudi-main", ADJUST_HINT)])
def test_generated_zero_prompt_buckets(name, hint):
    # Every query >= 4096 tokens with bs >= 1 exceeds a 2048-token budget.
    env = {"VLLM_PROMPT_QUERY_BUCKET_MIN": "4096", "VLLM_PROMPT_QUERY_BUCKET_MAX": "4096"}
    with pytest.raises(BucketConfigError) as info:
        get_profile(name).build(cfg(env, max_num_batched_tokens=2048), LINEAR)
    assert f"Generated 0 prompt buckets. {hint}" in str(info.value)
    assert info.value.variable == "VLLM_PROMPT_QUERY_BUCKET_MIN"


def test_v0101_keeps_all_prompt_buckets_when_none_fits_the_budget():
    # linear.py of v0.10.1 logs and ignores max_num_batched_tokens instead of failing.
    env = {"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_PROMPT_SEQ_BUCKET_MIN": "4096"}
    plan = get_profile("gaudi-0.10.1").build(cfg(env, max_num_batched_tokens=2048))
    assert plan.prompt and plan.omitted_prompt == []
    assert any(w.startswith("The current bucketing configuration") and "Ignoring max_num_batched_tokens" in w
               for w in plan.warnings)


def test_v0101_math_domain_error_explained():
    c = cfg(max_model_len=16417, max_num_batched_tokens=16512)
    with pytest.raises(BucketConfigError) as info:
        get_profile("gaudi-0.10.1").build(c)
    assert "math domain error" in str(info.value) and "multiple of the block size" in str(info.value)
    assert info.value.variable == "max_model_len"
    assert get_profile("gaudi-0.10.1").build(c, LINEAR).prompt  # linear copes
    assert get_profile("gaudi-0.10.1").build(replace_cfg(c, max_model_len=16384)).prompt


def test_v0101_zero_minimum_would_hang_upstream():
    with pytest.raises(BucketConfigError) as info:
        get_profile("gaudi-0.10.1").build(
            cfg({"VLLM_EXPONENTIAL_BUCKETING": "false", "VLLM_DECODE_BS_BUCKET_MIN": "0"}))
    assert info.value.variable == "VLLM_DECODE_BS_BUCKET_MIN"
    # From v0.15.1 a zero minimum means "start at step, add a 0 bucket".
    plan = get_profile("gaudi-0.15.1").build(cfg({"VLLM_EXPONENTIAL_BUCKETING": "false",
                                                  "VLLM_PROMPT_BS_BUCKET_MIN": "0", "VLLM_PROMPT_BS_BUCKET_MAX": "4"}))
    assert sorted({b[0] for b in plan.prompt}) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("profile", ["gaudi-0.10.1", "gaudi-0.15.1", "gaudi-0.26.0", "gaudi-main"])
def test_bucketing_off_means_no_buckets(profile):
    plan = get_profile(profile).build(cfg({"VLLM_ENABLE_BUCKETING": "false"}))
    assert plan.prompt == [] and plan.decode == []
    assert setting(plan, "VLLM_ENABLE_BUCKETING").value is False
    assert get_profile(profile).build(cfg({"VLLM_ENABLE_BUCKETING": "true"})).prompt


@pytest.mark.parametrize("strategy", [LINEAR, EXPONENTIAL, PADDING_AWARE])
def test_merged_prefill_packs_prompts_into_one_row(strategy):
    c = cfg({"VLLM_MERGED_PREFILL": "true"}, max_num_seqs=8)
    plan = get_profile("gaudi-main").build(c, strategy)
    assert plan.prompt and {b[0] for b in plan.prompt} == {1}
    # The runner passes max_num_seqs as the prefill count; the ctx bound is that many packed prompts.
    assert setting(plan, "max_num_prefill_seqs").value == 8
    for _, q, ctx in plan.prompt:
        assert ctx <= 8 * ((4096 - q // 8) // 128)
    # No token-budget filter under merged prefill: the query range reaches max_num_batched_tokens.
    assert max(b[1] for b in plan.prompt) == 8192
    plain = get_profile("gaudi-main").build(cfg(max_num_seqs=8), strategy)
    assert plain.prompt != plan.prompt


def test_sliding_window_drops_unsliceable_context_free_prompts():
    env = {"VLLM_BUCKETING_STRATEGY": "lin", "VLLM_PROMPT_QUERY_BUCKET_STEP": "384"}
    plain = get_profile("gaudi-main").build(cfg(env))
    plan = get_profile("gaudi-main").build(cfg({**env, "PT_HPU_SDPA_QKV_SLICE_MODE_FWD": "true",
                                                "VLLM_FUSEDSDPA_SLIDE_THLD": "1024", "PT_HPU_SDPA_BC_FACTOR": "512"}))
    expected = [b for b in plain.prompt if b[2] != 0 or b[1] < 1024 or b[1] % 512 == 0]
    assert plan.prompt == expected and len(expected) < len(plain.prompt)
    assert plan.decode == plain.decode
    # gaudi-0.10.1 has no sliding-window filter.
    off = cfg({"VLLM_EXPONENTIAL_BUCKETING": "false", "PT_HPU_SDPA_QKV_SLICE_MODE_FWD": "true"})
    assert get_profile("gaudi-0.10.1").build(off).prompt == get_profile("gaudi-0.10.1").build(replace_cfg(
        off, env={"VLLM_EXPONENTIAL_BUCKETING": "false"})).prompt


# ------------------------------------------------------------------------------------------ padding

def brute_force(buckets, target):
    """Upstream's find_equal_or_closest_greater_config, literally."""
    import bisect

    i = bisect.bisect_left(buckets, target)
    return next((b for b in buckets[i:] if all(x >= t for x, t in zip(b, target))), None)


def test_calc_fallback_value():
    # The examples of upstream's calc_fallback_value comment, and the small values.
    assert _calc_fallback(31, 32) == 128
    assert _calc_fallback(4001, 32) == 4096
    assert _calc_fallback(3, 2) == 4
    assert _calc_fallback(9000, 32) == 9408  # ceil(9000^(1/3)) = 21; 21*32 = 672; 14*672
    assert _calc_fallback(1, 32) == 1 and _calc_fallback(0, 32) == 0


@pytest.mark.parametrize("name", ALL)
def test_pad_prompt_finds_the_first_covering_bucket(name):
    p = get_profile(name)
    plan = p.build(cfg(p.strategy_env(LINEAR)))
    rng = random.Random(7)
    for _ in range(300):
        target = (1, rng.randint(1, 8192), rng.randint(0, 40))
        expected = brute_force(plan.prompt, target)
        if expected is None:
            continue
        r = p.pad_prompt(plan, *target)
        assert (r.requested, r.bucket, r.warmed, r.warning) == (target, expected, True, None)
    exact = plan.prompt[len(plan.prompt) // 2]
    assert p.pad_prompt(plan, *exact).bucket == exact


def test_pad_prompt_fallback_is_added_once():
    p = get_profile("gaudi-0.15.1")
    plan = p.build(cfg(max_num_batched_tokens=16384))
    n = len(plan.prompt)
    r = p.pad_prompt(plan, 3, 9000, 0)
    # bs: ceil(3/4)*4 = 4 (capped at max_num_seqs 64); query 9408 (below the 16384 budget); ctx 0.
    assert r.bucket == (4, 9408, 0) and not r.warmed
    assert r.warning == "Prompt bucket for (3, 9000, 0) was not prepared. Adding new bucket: (4, 9408, 0)"
    assert len(plan.prompt) == n + 1 and plan.prompt == sorted(plan.prompt)
    again = p.pad_prompt(plan, 3, 9000, 0)
    assert again.bucket == (4, 9408, 0) and not again.warmed and again.warning is None
    assert len(plan.prompt) == n + 1


def test_fallback_caps_per_version():
    c = cfg(max_num_seqs=8, max_num_batched_tokens=8192)
    # bs: v0.10.1 does not cap at max_num_seqs, later releases do.
    assert get_profile("gaudi-0.10.1").pad_prompt(get_profile("gaudi-0.10.1").build(c), 100, 64).bucket[0] == 100
    assert get_profile("gaudi-0.15.1").pad_prompt(get_profile("gaudi-0.15.1").build(c), 100, 64).bucket[0] == 8
    # Query is capped at the token budget everywhere.
    p = get_profile("gaudi-main")
    plan = p.build(c)
    assert p.pad_prompt(plan, 1, 9000).bucket[1] == 8192
    # Prompt ctx: v0.26+ caps at ceil((max_model_len - 1) / block_size) = 32, older at num_hpu_blocks.
    assert p.pad_prompt(plan, 1, 128, 500).bucket[2] == 32
    assert "Fallback prompt ctx 512 exceeds theoretical max 32 (max_model_len=4096, block_size=128), capping." \
        in plan.state["runtime_log"]
    old = get_profile("gaudi-0.15.1")
    assert old.pad_prompt(old.build(c), 1, 128, 500).bucket[2] == 512


def test_pad_decode_fallback_and_caps():
    p = get_profile("gaudi-0.15.1")
    plan = p.build(cfg())
    top = max(b[2] for b in plan.decode)
    r = p.pad_decode(plan, 3, top + 100)
    assert not r.warmed and r.requested == (3, 1, top + 100)
    assert r.warning == f"Decode bucket for (3, 1, {top + 100}) was not prepared. Adding new bucket: {r.bucket}"
    assert r.bucket == (4, 1, min(_calc_fallback(top + 100, 32), 4000))
    assert p.pad_decode(plan, 2, 100).warmed

    # v0.26+: lookups above the largest prepared ctx are capped to it first.
    main = get_profile("gaudi-main")
    plan = main.build(cfg())
    top = max(b[2] for b in plan.decode)
    r = main.pad_decode(plan, 1, top * 10)
    assert r.requested == (1, 1, top * 10) and r.bucket[2] == top and r.warmed and r.warning is None
    # bs beyond max_num_seqs: the fallback (capped to bs 64; ctx 50 -> 128) already exists, no warning.
    r = main.pad_decode(plan, 200, 50)
    assert r.bucket == (64, 1, 128) and r.warmed and r.warning is None


def test_pad_on_the_largest_vector_is_fast_and_exact():
    data = json.loads((VECTOR_DIR / "08_mns32_mml32768.json").read_text())
    row = data["results"]["gaudi-main/linear"]
    p = get_profile("gaudi-main")
    plan = p.build(row_config(data, row))
    assert len(plan.prompt) == 65281
    rng = random.Random(3)
    added = []
    for _ in range(300):
        target = (1, rng.randint(1, 33000), rng.randint(0, 300))
        expected = brute_force(plan.prompt, target)
        r = p.pad_prompt(plan, *target)
        if expected is not None:
            assert r.bucket == expected and r.warmed == (expected not in added) and r.warning is None
        else:
            # ctx beyond 256 blocks is capped, so the same uncovered shape adds (and warns) again, as upstream.
            assert not r.warmed and r.warning.startswith(f"Prompt bucket for {target} was not prepared.")
            added.append(r.bucket)
    assert added and plan.prompt == sorted(plan.prompt) and len(plan.prompt) == 65281 + len(added)


# ------------------------------------------------------------------------------ padding-aware range

@pytest.mark.parametrize("cfg5,expected", [
    # The examples of upstream's warmup_range_with_limits docstring.
    ((0, 8, 64, 64, 0), [0, 1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]),
    ((0, 8, 64, 64, 50), [0, 1, 2, 4, 8, 16, 32, 64]),
    ((0, 8, 64, 16, 50), [0, 1, 2, 4, 8, 16, 32, 48, 64]),
    ((16, 16, 128, 32, 25), [16, 32, 48, 64, 80, 96, 128]),
    # Vector 10 (gaudi-v0.26.0/padding_aware) prompt bs and ctx.
    ((1, 1, 16, 4, 25), [1, 2, 4, 6, 8, 12, 16]),
    ((0, 2, 31, 64, 25), [0, 1, 2, 4, 6, 8, 12, 16, 22, 30, 31]),
])
def test_padding_aware_range(cfg5, expected):
    assert padding_aware_range(*cfg5) == expected


# --------------------------------------------------------------------- the vector rows, once more

def strip_partial_wrapper(prefix: str) -> str:
    """Drop a trailing, cut-off "np.int64(<digits>" from a truncated expected line."""
    wrapper = "np.int64("
    for k in range(len(wrapper), 0, -1):
        tail = re.escape(wrapper[:k]) + (r"-?\d*$" if k == len(wrapper) else "$")
        m = re.search(tail, prefix)
        if m:
            return prefix[: m.start()]
    return prefix


@pytest.mark.parametrize("row_name", ["gaudi-v0.10.1/exponential"])
@pytest.mark.parametrize("file_name", ["03_mns64_mml4096.json", "05_mns256_mml4096.json", "07_mns16_mml16384.json",
                                       "10_mns128_mml4096_overrides.json"])
def test_rows_whose_truncation_cuts_a_numpy_wrapper(file_name, row_name):
    """The vectors cut long lines at 600 raw characters; in these rows the cut falls inside an
    `np.int64(` wrapper, which test_vectors' normaliser then cannot strip. Same check, with the partial
    wrapper removed from the expected prefix."""
    data = json.loads((VECTOR_DIR / file_name).read_text())
    row = data["results"][row_name]
    plan = get_profile(ROW_PROFILE[row_name.split("/")[0]]).build(row_config(data, row))
    assert_same_list(plan.prompt, row["prompt"], "prompt")
    assert_same_list(plan.decode, row["decode"], "decode")
    expected = [normalise_log_line(x) for x in row["log_lines"] if not _CONFIG_DUMP.match(x)]
    ours = [normalise_log_line(x) for x in plan.log_lines]
    assert len(ours) == len(expected)
    for a, b in zip(ours, expected):
        if b.endswith(TRUNCATED):
            assert a.startswith(strip_partial_wrapper(b[: -len(TRUNCATED)]))
        else:
            assert a == b


# ------------------------------------------------------------------------------- omitted buckets

def test_omitted_prompt_and_its_debug_line():
    # 4096 < query <= 8192 exceeds max_model_len: every such candidate is omitted.
    plan = get_profile("gaudi-0.26.0").build(cfg({"VLLM_BUCKETING_STRATEGY": "lin"}))
    assert len(plan.omitted_prompt) == 1024 and all(b[1] > 4096 for b in plan.omitted_prompt)
    line = next(x for x in plan.log_lines if x.startswith("Omitted"))
    first = ("('condition: ctx <= ceil((max_model_len - 1) / block_size) and query <= max_model_len', "
             "'-> bs, query, ctx: ', 1, 4224, 0)")
    assert line.split("\n")[:2] == ["Omitted 1024 prompt buckets:", first]
    assert len(line.split("\n")) == 1 + 1024
    # Upstream prints it at DEBUG level only: an explicit INFO logging level drops it.
    quiet = get_profile("gaudi-0.26.0").build(cfg({"VLLM_BUCKETING_STRATEGY": "lin", "VLLM_LOGGING_LEVEL": "INFO"}))
    assert not any(x.startswith("Omitted") for x in quiet.log_lines)
    assert quiet.omitted_prompt == plan.omitted_prompt and quiet.prompt == plan.prompt
    # v0.15.1 has no such line.
    old = get_profile("gaudi-0.15.1").build(cfg({"VLLM_EXPONENTIAL_BUCKETING": "false"}))
    assert old.omitted_prompt and not any(x.startswith("Omitted") for x in old.log_lines)


def test_candidate_explosion_refused():
    env = {"VLLM_BUCKETING_STRATEGY": "lin", "VLLM_PROMPT_BS_BUCKET_MAX": "4096", "VLLM_PROMPT_CTX_BUCKET_MAX": "256"}
    with pytest.raises(BucketConfigError) as info:
        get_profile("gaudi-main").build(cfg(env, max_model_len=2048))
    assert info.value.variable == "VLLM_PROMPT_BS_BUCKET_STEP"


def test_exponential_reports_the_variables_it_still_reads():
    plan = get_profile("gaudi-main").build(cfg())
    names = get_profile("gaudi-main").bucket_variables(EXPONENTIAL)
    got = {n: (setting(plan, n).value, setting(plan, n).source) for n in names}
    assert got == {"VLLM_BUCKETING_STRATEGY": ("exp", DEFAULT), "VLLM_CONTIGUOUS_PA": (False, DEFAULT),
                   "VLLM_BUCKETING_FROM_FILE": (None, DEFAULT), "VLLM_PROMPT_BS_BUCKET_MAX": (1, DEFAULT),
                   "VLLM_PROMPT_QUERY_BUCKET_MIN": (128, DEFAULT), "VLLM_PROMPT_CTX_BUCKET_MAX": (None, DEFAULT)}


@pytest.mark.parametrize("name", ALL)
def test_every_variable_read_has_a_setting(name):
    p = get_profile(name)
    for strategy in p.strategies:
        plan = p.build(cfg(), strategy)
        missing = [v for v in p.bucket_variables(strategy) if plan.setting(v) is None]
        assert not missing, (strategy, missing)
        for engine_value in ("max_num_prefill_seqs", "prefix_caching", "VLLM_CONTIGUOUS_PA", "num_hpu_blocks"):
            assert plan.setting(engine_value) is not None
        assert not plan.ignored_settings()  # nothing set, nothing ignored


# ----------------------------------------------------------------- unified attention and bucket files

def test_unified_attention_replaces_prompt_and_decode_buckets():
    plan = get_profile("gaudi-0.15.1").build(cfg({"VLLM_UNIFIED_ATTN": "true"}, max_num_seqs=8))
    assert plan.prompt == [] and plan.decode == [] and plan.unified
    assert all(len(b) == 4 and b[3] in (0, 1) for b in plan.unified)
    # Non-causal buckets only up to max_num_seqs query tokens.
    assert max(b[0] for b in plan.unified if b[3] == 0) <= 8
    # Unified attention needs contiguous PA; turning it off is upstream's assertion.
    with pytest.raises(BucketConfigError, match="requires contiguous_pa"):
        get_profile("gaudi-0.15.1").build(cfg({"VLLM_UNIFIED_ATTN": "true", "VLLM_CONTIGUOUS_PA": "false"}))
    # One sequence: upstream divides by query // 2 == 0.
    with pytest.raises(BucketConfigError, match="ZeroDivisionError"):
        get_profile("gaudi-0.15.1").build(cfg({"VLLM_UNIFIED_ATTN": "true"}, max_num_seqs=1))


def test_bucket_file_lines_and_filters(tmp_path):
    path = tmp_path / "buckets.txt"
    good = ("# comment\n\n(1, 2048, 0)\n(1, [256, 512], [0, 4])\n(2, range(128, 513, 128), 0)\n"
            "(4, 1, 100)\n(8, 1, 4)\n(1, 8192, 0)\n")
    path.write_text(good)
    env = {"VLLM_BUCKETING_FROM_FILE": str(path), "VLLM_CONTIGUOUS_PA": "false"}
    plan = get_profile("gaudi-main").build(cfg(env, max_num_batched_tokens=4096))
    # (1, 8192, 0) exceeds max_model_len 4096; the bad lines are skipped.
    assert plan.prompt == sorted([(1, 2048, 0), (1, 256, 0), (1, 256, 4), (1, 512, 0), (1, 512, 4),
                                  (2, 128, 0), (2, 256, 0), (2, 384, 0), (2, 512, 0)])
    # Decode: without contiguous PA bs <= blocks, and blocks capped at bs * ceil(L / B).
    assert plan.decode == [(4, 1, 100)]
    assert get_profile("gaudi-0.10.1").build(cfg(env)).prompt != plan.prompt  # 0.10.1 has no bucket files
    # A line the parser skips: v0.15.1 skips it, v0.26+ crash on their own warning call.
    path.write_text(good + "(1, 2)\nnot python\n")
    assert get_profile("gaudi-0.15.1").build(cfg(env)).decode == plan.decode
    with pytest.raises(BucketConfigError, match="AttributeError"):
        get_profile("gaudi-main").build(cfg(env))
    with pytest.raises(BucketConfigError) as info:
        get_profile("gaudi-main").build(cfg({"VLLM_BUCKETING_FROM_FILE": str(tmp_path / "missing.txt")}))
    assert info.value.variable == "VLLM_BUCKETING_FROM_FILE"
