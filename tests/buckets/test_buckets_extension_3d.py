"""The 3-D extension profiles (fork-1.22 = extension 8211e0b, fork-main = extension 7717587).

Expected values below were worked out from the upstream code by hand (and cross-checked by running
it); the vector rows in test_vectors.py cover the default, no-prefix-caching configurations.
"""

from __future__ import annotations

import pytest

from tuner.buckets import (
    DEFAULT,
    EXPONENTIAL,
    FORCED,
    IGNORED,
    LINEAR,
    USER,
    BucketConfigError,
    ServerConfig,
    get_profile,
)
from tuner.buckets.extension_3d import _fallback_value, exp_range, parse_bool

NAMES = ("fork-1.22", "fork-main")
LIN = {"VLLM_EXPONENTIAL_BUCKETING": "false"}


def cfg(env=None, **kw):
    base = dict(block_size=128, max_num_seqs=4, max_model_len=2048, max_num_batched_tokens=4096, num_hpu_blocks=1000)
    base.update(kw)
    return ServerConfig(env=env or {}, **base)


@pytest.fixture(params=NAMES)
def profile(request):
    return get_profile(request.param)


# ---- class attributes, strategy selection ----------------------------------------------------------

def test_attributes(profile):
    assert (profile.engine, profile.dims, profile.default_strategy) == ("v0", 3, EXPONENTIAL)
    assert profile.strategies == (EXPONENTIAL, LINEAR)
    assert "vllm-hpu-extension" in profile.upstream


@pytest.mark.parametrize("raw", ["true", "TRUE", "t", "1", "yes", "Y", "on", "On"])
def test_boolean_true_words(profile, raw):
    assert parse_bool(raw)
    assert profile.select_strategy({"VLLM_EXPONENTIAL_BUCKETING": raw}) == (EXPONENTIAL, [])


@pytest.mark.parametrize("raw", ["false", "0", "no", "off", "", "ture", "enabled", "2"])
def test_boolean_anything_else_is_false(profile, raw):
    assert profile.select_strategy({"VLLM_EXPONENTIAL_BUCKETING": raw}) == (LINEAR, [])
    plan = profile.build(cfg({"VLLM_EXPONENTIAL_BUCKETING": raw}))
    assert plan.strategy == LINEAR
    assert plan.setting("VLLM_EXPONENTIAL_BUCKETING").source == USER


def test_strategy_env_and_variables(profile):
    assert profile.strategy_env(EXPONENTIAL) == {"VLLM_EXPONENTIAL_BUCKETING": "true"}
    # An explicit strategy wins over an env that selects the other one.
    env_linear = ServerConfig(block_size=128, max_num_seqs=8, max_model_len=1024, max_num_batched_tokens=2048,
                              num_hpu_blocks=500, env={"VLLM_EXPONENTIAL_BUCKETING": "false"})
    assert profile.build(env_linear, EXPONENTIAL).strategy == EXPONENTIAL
    assert profile.strategy_env(LINEAR) == {"VLLM_EXPONENTIAL_BUCKETING": "false"}
    assert profile.select_strategy({}) == (EXPONENTIAL, [])
    lin = profile.bucket_variables(LINEAR)
    assert "VLLM_DECODE_BLOCK_BUCKET_STEP" in lin and "VLLM_PROMPT_BS_BUCKET_LIMIT" not in lin
    assert "VLLM_PROMPT_BS_BUCKET_MIN" not in profile.bucket_variables(EXPONENTIAL)
    with pytest.raises(BucketConfigError):
        profile.bucket_variables("padding_aware")


# ---- padding ---------------------------------------------------------------------------------------

def test_pad_prompt_first_covering_bucket(profile):
    plan = profile.build(cfg(LIN))
    r = profile.pad_prompt(plan, 3, 300)
    assert (r.bucket, r.warmed, r.warning) == ((4, 384, 0), True, None)
    # Bisect lands on (1, 129, 0); the first later bucket covering all dims is (1, 256, 0).
    assert profile.pad_prompt(plan, 1, 129).bucket == (1, 256, 0)


def test_pad_prompt_fallback_added_once(profile):
    plan = profile.build(cfg(max_num_batched_tokens=9216))
    before = len(plan.prompt)
    r = profile.pad_prompt(plan, 3, 9000)
    assert r.bucket == (4, 9216, 0) and not r.warmed  # query 9408 capped at max_num_batched_tokens
    assert r.warning == "Prompt bucket for (3, 9000, 0) was not prepared. Adding new bucket: (4, 9216, 0)"
    assert len(plan.prompt) == before + 1 and plan.prompt == sorted(plan.prompt)
    again = profile.pad_prompt(plan, 3, 9000)
    assert (again.bucket, again.warmed, again.warning) == ((4, 9216, 0), True, None)


def test_pad_decode_and_fallback(profile):
    plan = profile.build(cfg(LIN))
    assert profile.pad_decode(plan, 3, 900).bucket == (4, 1, 1000)
    r = profile.pad_decode(plan, 3, 5000)
    assert r.bucket == (4, 1, 1000)  # ctx capped at num_hpu_blocks
    assert r.warning == "Decode bucket for (3, 1, 5000) was not prepared. Adding new bucket: (4, 1, 1000)"
    assert plan.decode.count((4, 1, 1000)) == 2  # upstream appends even a duplicate


def test_fallback_value_rule():
    assert [_fallback_value(n, 32) for n in (0, 1, 31, 4001)] == [0, 1, 128, 4096]
    assert _fallback_value(3, 2) == 4 and _fallback_value(300, 2) == 308


def test_pad_fallback_with_sliding_window(profile):
    env = {"PT_HPU_SDPA_QKV_SLICE_MODE_FWD": "1", "VLLM_FUSEDSDPA_SLIDE_THLD": "1024", "PT_HPU_SDPA_BC_FACTOR": "512"}
    plan = profile.build(cfg(env, max_model_len=4096, max_num_batched_tokens=8192))
    assert all(b[1] < 1024 or b[1] % 512 == 0 for b in plan.prompt)
    assert plan.omitted_prompt  # 1152, 1408, ... dropped by the slice rule
    assert profile.pad_prompt(plan, 1, 9000).bucket == (1, 9216, 0)  # slice multiple, no token cap


# ---- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["VLLM_PROMPT_BS_BUCKET_MAX", "VLLM_DECODE_BLOCK_BUCKET_LIMIT"])
@pytest.mark.parametrize("env", [{}, LIN])
def test_non_integer_fails_under_both_strategies(profile, name, env):
    with pytest.raises(BucketConfigError) as info:
        profile.build(cfg({**env, name: "12k"}))
    assert info.value.variable == name
    assert str(info.value) == f"{name}: exception during construction: invalid literal for int() with base 10: '12k'"


def test_min_greater_than_max(profile):
    with pytest.raises(BucketConfigError) as info:
        profile.build(cfg({**LIN, "VLLM_DECODE_BS_BUCKET_MIN": "8"}))
    assert info.value.variable == "VLLM_DECODE_BS_BUCKET_MIN"
    assert "Min. batch size cannot be greater than max. batch size" in str(info.value)


def test_min_zero_would_hang(profile):
    with pytest.raises(BucketConfigError) as info:
        profile.build(cfg({**LIN, "VLLM_PROMPT_SEQ_BUCKET_MIN": "0"}))
    assert info.value.variable == "VLLM_PROMPT_SEQ_BUCKET_MIN"


def test_empty_prompt_range(profile):
    with pytest.raises(BucketConfigError, match=r"No buckets could be captured .* bs:\[3, 2, 3\], seq:\[128,"):
        profile.build(cfg({**LIN, "VLLM_PROMPT_BS_BUCKET_MIN": "3", "VLLM_PROMPT_BS_BUCKET_STEP": "2",
                           "VLLM_PROMPT_BS_BUCKET_MAX": "3"}))


def test_bucketing_strategy_is_validated_but_not_read():
    env = {"VLLM_BUCKETING_STRATEGY": "linear_bucketing"}
    for name in NAMES:
        plan = get_profile(name).build(cfg(env))
        assert plan.strategy == EXPONENTIAL
        assert plan.setting("VLLM_BUCKETING_STRATEGY").source == IGNORED
    with pytest.raises(BucketConfigError, match=r"lin is not in allowed options: \('exponential_bucketing'"):
        get_profile("fork-1.22").build(cfg({"VLLM_BUCKETING_STRATEGY": "lin"}))
    with pytest.raises(BucketConfigError, match=r"^bucketing_strategy: lin is not in allowed options: \[exp"):
        get_profile("fork-main").build(cfg({"VLLM_BUCKETING_STRATEGY": "lin"}))


def test_exponential_prefix_caching_max_len_not_block_multiple(profile):
    # Without contiguous PA the top query bucket rounds up to 2048 > 2000: upstream log2(-1) fails.
    with pytest.raises(BucketConfigError, match="math domain error") as info:
        profile.build(cfg(max_model_len=2000, prefix_caching=True))
    assert info.value.variable == "max_model_len"


# ---- settings, warnings, ignored variables ------------------------------------------------------

def test_linear_settings(profile):
    plan = profile.build(cfg({**LIN, "VLLM_DECODE_BS_BUCKET_STEP": "2"}, max_num_prefill_seqs=2))
    assert plan.setting("VLLM_DECODE_BS_BUCKET_STEP").source == USER
    assert plan.setting("VLLM_DECODE_BLOCK_BUCKET_MAX").value == 1000
    assert plan.setting("VLLM_PROMPT_BS_BUCKET_MAX").value == 2
    assert plan.setting("max_num_prefill_seqs").source == USER
    assert plan.setting("VLLM_CONTIGUOUS_PA").value is True and plan.contiguous_pa
    assert plan.setting("num_hpu_blocks").value == 1000
    assert not plan.warnings and not plan.ignored_settings()


def test_exponential_overwrite_warnings_and_settings(profile):
    env = {"VLLM_PROMPT_BS_BUCKET_MAX": "16", "VLLM_DECODE_BLOCK_BUCKET_LIMIT": "5"}
    plan = profile.build(cfg(env))
    stars = "*" * 55
    assert plan.warnings == [
        stars, "Using Exponential Strategy - Your configuration VLLM_PROMPT_BS_BUCKET_MAX=16 will be overwritten!",
        stars,
        stars, "Using Exponential Strategy - Your configuration VLLM_DECODE_BLOCK_BUCKET_LIMIT=5 will be overwritten!",
        stars,
    ]
    assert stars not in plan.log_lines and plan.warnings[1] in plan.log_lines
    used = plan.setting("VLLM_PROMPT_BS_BUCKET_MAX")
    assert (used.value, used.source) == (4, FORCED)
    assert plan.setting("VLLM_DECODE_BLOCK_BUCKET_LIMIT").value == 11  # ceil(log2 1000) + 1
    assert plan.setting("VLLM_PROMPT_SEQ_BUCKET_STEP").source == DEFAULT
    ignored = {s.name: s for s in plan.ignored_settings()}
    assert ignored["VLLM_PROMPT_BS_BUCKET_MAX"].value == 16
    assert "will be overwritten!" in ignored["VLLM_DECODE_BLOCK_BUCKET_LIMIT"].note


def test_ignored_variables(profile):
    env = {**LIN, "VLLM_PROMPT_QUERY_BUCKET_MAX": "512", "VLLM_PROMPT_SEQ_BUCKET_LIMIT": "4",
           "VLLM_ENABLE_BUCKETING": "false", "VLLM_DECODE_SEQ_BUCKET_MAX": "2048", "VLLM_GRAPH_RESERVED_MEM": "0.2"}
    plan = profile.build(cfg(env))
    ignored = {s.name for s in plan.ignored_settings()}
    assert ignored == {"VLLM_PROMPT_QUERY_BUCKET_MAX", "VLLM_PROMPT_SEQ_BUCKET_LIMIT", "VLLM_ENABLE_BUCKETING",
                       "VLLM_DECODE_SEQ_BUCKET_MAX"}
    assert plan.prompt == profile.build(cfg(LIN)).prompt
    assert all(s.note for s in plan.ignored_settings())


# ---- generation details beyond the vectors ---------------------------------------------------------

def test_exp_range_docstring_example_and_tie_break():
    assert exp_range(128, 128, 2048, 10, True) == [128, 256, 384, 512, 640, 768, 896, 1152, 1536, 2048]
    assert exp_range(1, 2, 4, 3, True) == [1, 2, 4]  # point 2.0 is a tie between 1 and 3: smaller wins
    assert exp_range(1, 2, 5, 4, False) == [1, 2, 4, 6]  # no contiguous PA: top rounded past max
    assert exp_range(128, 128, 1000, 11, True) == [128, 256, 384, 512, 640, 768, 896]  # candidates ran out


def test_linear_decode_contiguous_pa_appends_num_blocks(profile):
    with_cpa = profile.build(cfg(LIN)).decode
    without = profile.build(cfg({**LIN, "VLLM_CONTIGUOUS_PA": "false"})).decode
    assert (1, 1, 1000) in with_cpa and (1, 1, 1000) not in without
    user_max = profile.build(cfg({**LIN, "VLLM_DECODE_BLOCK_BUCKET_MAX": "1000"})).decode
    assert (1, 1, 1000) not in user_max


def test_linear_prefix_caching_context_range():
    c = cfg(LIN, max_num_seqs=1, max_model_len=512, max_num_batched_tokens=100000, prefix_caching=True)
    old, new = get_profile("fork-1.22").build(c), get_profile("fork-main").build(c)
    assert not old.contiguous_pa and old.prefix_caching
    # query 128 leaves (512-128)//128 = 3 blocks: 8211e0b emits ctx 0..4, 7717587 ctx 0..3.
    assert [b[2] for b in old.prompt if b[1] == 128] == [0, 1, 2, 3, 4]
    assert [b[2] for b in new.prompt if b[1] == 128] == [0, 1, 2, 3]


def test_exponential_prefix_caching_duplicates():
    c = cfg(max_num_seqs=1, max_model_len=384, max_num_batched_tokens=100000, prefix_caching=True)
    # R = 2 blocks, n = 2 points: ceil(2**0.5) = ceil(2**1) = 2, kept twice by 8211e0b only.
    assert get_profile("fork-1.22").build(c).prompt.count((1, 128, 2)) == 2
    assert get_profile("fork-main").build(c).prompt.count((1, 128, 2)) == 1


def test_token_budget(profile):
    plan = profile.build(cfg(LIN, max_num_batched_tokens=2048))
    assert (4, 1024, 0) in plan.omitted_prompt and (4, 512, 0) in plan.prompt
    tiny = profile.build(cfg(LIN, max_num_batched_tokens=64))
    assert len(tiny.prompt) == 3 * 16 and not tiny.omitted_prompt  # nothing fits: upstream keeps everything
    assert any("Ignoring max_num_batched_tokens at risk of out-of-memory errors." in w for w in tiny.warnings)


def test_merged_prefill_linear(profile):
    plan = profile.build(cfg({**LIN, "VLLM_MERGED_PREFILL": "true"}))
    assert {b[0] for b in plan.prompt} == {1} and max(b[1] for b in plan.prompt) == 4096
    assert "prompt bs cfg: (1, 32, 4) -> (1, 1, 1)" in plan.log_lines[6]
    assert plan.setting("VLLM_PROMPT_BS_BUCKET_MAX").source == FORCED
