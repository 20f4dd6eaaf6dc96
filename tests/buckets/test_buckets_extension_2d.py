"""Unit tests for the 2-D extension profiles (fork 1.19 .. 1.21.3); the vectors cover the lists."""

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
from tuner.buckets.extension_2d import _exp_range, _pad_2b4, _pad_4ff, _pad_29b, _pad_d4b

ALL = ("fork-1.19", "fork-1.20", "fork-1.21.0", "fork-1.21.2")


def cfg(env=None, **kw):
    base = dict(block_size=128, max_num_seqs=8, max_model_len=2048, max_num_batched_tokens=4096, num_hpu_blocks=1000)
    base.update(kw)
    return ServerConfig(env=env or {}, **base)


# --- profile table ---

def test_profiles_and_alias():
    assert get_profile("fork-1.21.3") is get_profile("fork-1.21.2")
    for name in ALL:
        p = get_profile(name)
        assert p.engine == "v0" and p.dims == 2 and p.default_strategy == LINEAR
        assert p.upstream.startswith("HabanaAI/vllm-hpu-extension@")
    assert get_profile("fork-1.19").strategies == (LINEAR,)
    assert get_profile("fork-1.21.0").strategies == (LINEAR, EXPONENTIAL)


# --- strategy selection ---

@pytest.mark.parametrize("value,expected", [("true", EXPONENTIAL), ("TRUE", EXPONENTIAL), ("True", EXPONENTIAL),
                                            ("1", LINEAR), ("yes", LINEAR), ("on", LINEAR), ("false", LINEAR)])
def test_exponential_switch_accepts_only_literal_true(value, expected):
    for name in ("fork-1.21.0", "fork-1.21.2"):
        assert get_profile(name).select_strategy({"VLLM_EXPONENTIAL_BUCKETING": value}) == (expected, [])


def test_old_releases_have_no_switch():
    p = get_profile("fork-1.19")
    assert p.select_strategy({"VLLM_EXPONENTIAL_BUCKETING": "true"}) == (LINEAR, [])
    assert p.strategy_env(LINEAR) == {}
    with pytest.raises(BucketConfigError) as info:
        p.build(cfg(), strategy=EXPONENTIAL)
    assert info.value.variable == "strategy"
    plan = p.build(cfg({"VLLM_EXPONENTIAL_BUCKETING": "true"}))
    assert plan.strategy == LINEAR
    assert plan.setting("VLLM_EXPONENTIAL_BUCKETING").source == IGNORED


def test_strategy_env_round_trip():
    p = get_profile("fork-1.21.2")
    assert p.strategy_env(EXPONENTIAL) == {"VLLM_EXPONENTIAL_BUCKETING": "true"}
    assert p.strategy_env(LINEAR) == {"VLLM_EXPONENTIAL_BUCKETING": "false"}
    assert p.build(cfg({"VLLM_EXPONENTIAL_BUCKETING": "true"}), strategy=LINEAR).strategy == LINEAR
    assert p.build(cfg(), strategy=EXPONENTIAL).strategy == EXPONENTIAL


def test_bucket_variables():
    lin = get_profile("fork-1.20").bucket_variables(LINEAR)
    assert len(lin) == 12 and "VLLM_DECODE_BLOCK_BUCKET_MAX" in lin
    exp = get_profile("fork-1.21.0").bucket_variables(EXPONENTIAL)
    assert set(exp) == {"VLLM_PROMPT_BS_BUCKET_LIMIT", "VLLM_DECODE_BS_BUCKET_LIMIT", "VLLM_PROMPT_SEQ_BUCKET_LIMIT",
                        "VLLM_DECODE_BLOCK_BUCKET_LIMIT", "VLLM_EXPONENTIAL_BUCKETING"}
    assert "VLLM_EXPONENTIAL_BUCKETING" in get_profile("fork-1.21.2").bucket_variables(LINEAR)


# --- linear find_bucket rules (spec C.1) ---

@pytest.mark.parametrize("v,lo,step,expected", [
    (3, 1, 32, {"4ff": 4, "d4b": 4, "2b4": 4, "29b": 4}),
    (200, 128, 128, {"4ff": 256, "d4b": 256, "2b4": 256, "29b": 256}),
    # 4ff/d4b scale min by next_pow2(v); 2b4/29b look for the smallest min*2^k >= v.
    (5, 2, 32, {"4ff": 16, "d4b": 16, "2b4": 8, "29b": 8}),
    # 29b uses the power of two only while it stays <= step.
    (33, 3, 32, {"4ff": 64, "d4b": 64, "2b4": 48, "29b": 64}),
    # values <= min: 4ff still doubles (min(round_up, pow) then max with min), the others return min.
    (2, 4, 64, {"4ff": 8, "d4b": 4, "2b4": 4, "29b": 4}),
    (0, 128, 128, {"4ff": 128, "d4b": 128, "2b4": 128, "29b": 128}),
])
def test_linear_find_bucket_per_commit(v, lo, step, expected):
    rules = {"4ff": _pad_4ff, "d4b": _pad_d4b, "2b4": _pad_2b4, "29b": _pad_29b}
    assert {k: f(v, lo, step) for k, f in rules.items()} == expected


def test_linear_pad_prompt_and_decode():
    p = get_profile("fork-1.21.2")
    plan = p.build(cfg(num_hpu_blocks=1000))
    r = p.pad_prompt(plan, 3, 300)
    assert (r.requested, r.bucket, r.warmed, r.warning) == ((3, 300), (4, 384), True, None)
    r = p.pad_prompt(plan, 8, 2048)  # 8*2048 > budget: omitted, so never warmed
    assert r.bucket == (8, 2048) and not r.warmed and (8, 2048) in plan.omitted_prompt
    r = p.pad_prompt(plan, 9, 100)  # above prompt bs max (8): padded anyway, never warmed
    assert r.bucket == (16, 128) and not r.warmed
    r = p.pad_prompt(plan, 40, 100)  # past the ramp-up: step grid
    assert r.bucket == (64, 128) and not r.warmed
    r = p.pad_decode(plan, 2, 950)  # rounds to 1024, capped at num_hpu_blocks
    assert r.bucket == (2, 1000) and r.warmed
    r = p.pad_decode(plan, 3, 5000)
    assert r.bucket == (4, 1000) and r.warmed


def test_ctx_is_not_a_dimension():
    p = get_profile("fork-1.21.0")
    plan = p.build(cfg())
    assert p.pad_prompt(plan, 1, 100, ctx=5) == p.pad_prompt(plan, 1, 100)


# --- exponential ---

def test_exp_range_docstring_example_and_end_at_max():
    # The fill step adds 768 to the nine values a plain de-duplication would keep (spec B.1).
    assert _exp_range(128, 128, 2048, 10, end_at_max=False) == [128, 256, 384, 512, 640, 768, 896, 1152, 1536, 2048]
    assert _exp_range(1, 1, 4, 3, False) == [1, 2, 4]
    assert _exp_range(128, 128, 1000, 8, True)[-1] == 1000  # 29bc7a4 with contiguous PA: exactly max
    assert _exp_range(128, 128, 1000, 8, False)[-1] == 1024  # 2b4ba56 rounds the last point up
    assert _exp_range(1, 1, 3, 10, False) == [1, 2, 3]  # runs out of grid values: stops early
    assert _exp_range(128, 128, 4096, 1, False) == [4096]


def test_exponential_padding_and_missing_bucket():
    env = {"VLLM_EXPONENTIAL_BUCKETING": "true"}
    for name in ("fork-1.21.0", "fork-1.21.2"):
        p = get_profile(name)
        plan = p.build(cfg(env, max_num_seqs=4, max_num_batched_tokens=8192))
        r = p.pad_prompt(plan, 3, 1000)  # bs values 1,2,4; seq values from the generated list
        seqs = sorted({b[1] for b in plan.prompt})
        assert r.bucket == (4, min(s for s in seqs if s >= 1000)) and r.warning is None
        r = p.pad_prompt(plan, 5, 100)  # no bs value >= 5
        assert r.bucket[0] == 5 and not r.warmed and r.warning
        r = p.pad_decode(plan, 1, 999999)  # beyond the blocks: unpadded, then capped by num_hpu_blocks
        assert r.bucket == (1, 1000) and r.warning
    assert "Couldn't find a bucket for value: 5 in [" in get_profile("fork-1.21.2").pad_prompt(plan, 5, 100).warning
    plan0 = get_profile("fork-1.21.0").build(cfg(env, max_num_seqs=4, max_num_batched_tokens=8192))
    assert "pdb" in get_profile("fork-1.21.0").pad_prompt(plan0, 5, 100).warning


def test_exponential_settings_are_forced():
    env = {"VLLM_EXPONENTIAL_BUCKETING": "true", "VLLM_PROMPT_BS_BUCKET_MAX": "64",
           "VLLM_DECODE_BS_BUCKET_LIMIT": "5"}
    plan = get_profile("fork-1.21.2").build(cfg(env))
    s = plan.setting("VLLM_PROMPT_BS_BUCKET_MAX")
    assert (s.value, s.source) == (8, FORCED) and "overwritten" in s.note
    assert plan.setting("VLLM_PROMPT_BS_BUCKET_STEP").value == 1
    assert plan.setting("VLLM_DECODE_BS_BUCKET_LIMIT").source == USER
    assert plan.setting("VLLM_PROMPT_SEQ_BUCKET_LIMIT").source == DEFAULT
    assert len({b[0] for b in plan.decode}) == 5
    assert "[non-modifiable] VLLM_PROMPT_BS_BUCKET_MAX=8" in plan.log_lines
    assert "VLLM_DECODE_BS_BUCKET_LIMIT=5 (default: 4)" in plan.log_lines


# --- linear settings, ignored variables, warnings ---

def test_linear_settings_sources():
    plan = get_profile("fork-1.20").build(cfg({"VLLM_DECODE_BS_BUCKET_STEP": "16"}, max_num_prefill_seqs=4))
    names = [s.name for s in plan.settings if s.name.endswith(("_MIN", "_STEP", "_MAX"))]
    assert len(names) == 12
    assert plan.setting("VLLM_DECODE_BS_BUCKET_STEP").source == USER
    assert plan.setting("VLLM_PROMPT_SEQ_BUCKET_MAX").value == 1024  # hard-coded before 2b4ba56
    assert plan.setting("VLLM_PROMPT_BS_BUCKET_MAX").value == 4
    assert plan.setting("max_num_prefill_seqs").source == USER
    assert plan.setting("max_model_len") is None  # not used by d4b0d38
    assert get_profile("fork-1.21.0").build(cfg()).setting("VLLM_PROMPT_SEQ_BUCKET_MAX").value == 2048


def test_29b_decode_block_max_becomes_num_hpu_blocks():
    plan = get_profile("fork-1.21.2").build(cfg(num_hpu_blocks=1000))
    s = plan.setting("VLLM_DECODE_BLOCK_BUCKET_MAX")
    assert (s.value, s.source) == (1000, DEFAULT)
    assert max(b[1] for b in plan.decode) == 1000
    assert all(bs <= blocks for bs, blocks in plan.decode)
    # An explicit max keeps the user's range (and the num_hpu_blocks clamp of the walk).
    plan = get_profile("fork-1.21.2").build(cfg({"VLLM_DECODE_BLOCK_BUCKET_MAX": "512"}))
    assert max(b[1] for b in plan.decode) == 512
    # Without contiguous PA the default max (S*L//B = 128) stays.
    plan = get_profile("fork-1.21.2").build(cfg({"VLLM_CONTIGUOUS_PA": "false"}))
    assert max(b[1] for b in plan.decode) == 128 and plan.contiguous_pa is False


def test_ignored_variables():
    env = {"VLLM_PROMPT_BS_BUCKET_LIMIT": "3", "VLLM_PROMPT_QUERY_BUCKET_MIN": "128", "VLLM_BUCKETING_STRATEGY": "pad",
           "VLLM_DECODE_SEQ_BUCKET_MAX": "2048", "VLLM_PROMPT_BS_BUCKET_PAD_MAX": "4"}
    plan = get_profile("fork-1.21.0").build(cfg(env))
    ignored = {s.name: s for s in plan.ignored_settings()}
    assert set(ignored) == set(env)
    assert "exponential" in ignored["VLLM_PROMPT_BS_BUCKET_LIMIT"].note
    assert "vllm-gaudi" in ignored["VLLM_PROMPT_QUERY_BUCKET_MIN"].note
    assert "1.17" in ignored["VLLM_DECODE_SEQ_BUCKET_MAX"].note
    # Under exponential, LIMIT is read and MIN/STEP/MAX are forced, not ignored.
    plan = get_profile("fork-1.21.0").build(cfg({**env, "VLLM_PROMPT_BS_BUCKET_MIN": "2"}), strategy=EXPONENTIAL)
    ignored = {s.name for s in plan.ignored_settings()}
    assert "VLLM_PROMPT_BS_BUCKET_LIMIT" not in ignored and "VLLM_PROMPT_BS_BUCKET_MIN" not in ignored


def test_token_budget_too_small_keeps_everything_with_warning():
    plan = get_profile("fork-1.19").build(cfg(max_num_batched_tokens=100))
    assert plan.omitted_prompt == [] and len(plan.prompt) == 4 * 8  # bs 1,2,4,8 x seq 128..1024
    assert len(plan.warnings) == 1 and plan.warnings[0].startswith("The current bucketing configuration")
    assert "smallest bucket (128) would exceed token budget" in plan.warnings[0]
    assert plan.warnings[0] in plan.log_lines


def test_merged_prefill_rewrites_prompt_config():
    plan = get_profile("fork-1.21.2").build(cfg({"VLLM_MERGED_PREFILL": "true"}))
    assert {b[0] for b in plan.prompt} == {1} and max(b[1] for b in plan.prompt) == 4096
    assert "prompt bs cfg: (1, 32, 8) -> (1, 1, 1)" in plan.log_lines
    assert get_profile("fork-1.20").build(cfg({"VLLM_MERGED_PREFILL": "true"})).setting("VLLM_MERGED_PREFILL") is None


# --- errors ---

@pytest.mark.parametrize("name", ALL)
def test_non_integer_env_names_variable(name):
    with pytest.raises(BucketConfigError) as info:
        get_profile(name).build(cfg({"VLLM_DECODE_BS_BUCKET_STEP": "32.0"}))
    assert info.value.variable == "VLLM_DECODE_BS_BUCKET_STEP"


@pytest.mark.parametrize("name", ALL)
def test_min_greater_than_max(name):
    with pytest.raises(BucketConfigError) as info:
        get_profile(name).build(cfg({"VLLM_PROMPT_BS_BUCKET_MIN": "16"}))  # max = 8 sequences
    assert info.value.variable == "VLLM_PROMPT_BS_BUCKET_MIN"
    assert "Min. batch size cannot be greater than max. batch size" in str(info.value)


def test_min_above_num_hpu_blocks_on_29b():
    # 29bc7a4 lowers the block max to num_hpu_blocks, so a larger block MIN trips the same assertion.
    with pytest.raises(BucketConfigError) as info:
        get_profile("fork-1.21.2").build(cfg({"VLLM_DECODE_BLOCK_BUCKET_MIN": "256"}, num_hpu_blocks=200))
    assert info.value.variable == "VLLM_DECODE_BLOCK_BUCKET_MIN" and "num_hpu_blocks" in str(info.value)


def test_zero_min_and_bad_limit():
    with pytest.raises(BucketConfigError) as info:
        get_profile("fork-1.19").build(cfg({"VLLM_PROMPT_SEQ_BUCKET_MIN": "0"}))
    assert info.value.variable == "VLLM_PROMPT_SEQ_BUCKET_MIN"
    with pytest.raises(BucketConfigError) as info:
        env = {"VLLM_EXPONENTIAL_BUCKETING": "true", "VLLM_DECODE_BS_BUCKET_LIMIT": "0"}
        get_profile("fork-1.21.0").build(cfg(env))
    assert info.value.variable == "VLLM_DECODE_BS_BUCKET_LIMIT"


def test_empty_prompt_range_is_refused():
    # min 3 > step 2: no ramp-up, and the only stable value (2) is below min.
    with pytest.raises(BucketConfigError) as info:
        get_profile("fork-1.20").build(cfg({"VLLM_PROMPT_BS_BUCKET_MIN": "3", "VLLM_PROMPT_BS_BUCKET_STEP": "2",
                                            "VLLM_PROMPT_BS_BUCKET_MAX": "3"}))
    assert "No buckets could be captured" in str(info.value)


def test_prefix_caching_and_contiguous_pa():
    with pytest.raises(BucketConfigError) as info:
        get_profile("fork-1.21.0").build(cfg({"VLLM_CONTIGUOUS_PA": "true"}, prefix_caching=True))
    assert info.value.variable == "VLLM_CONTIGUOUS_PA"
    plan = get_profile("fork-1.21.2").build(cfg(prefix_caching=True))
    assert plan.contiguous_pa is False and plan.setting("VLLM_CONTIGUOUS_PA").value is False
    assert max(b[1] for b in plan.decode) == 128  # no stretch to num_hpu_blocks without contiguous PA
    # 1.19/1.20 runners have no APC guard: contiguous PA stays on.
    assert get_profile("fork-1.19").build(cfg(prefix_caching=True)).contiguous_pa is True
    # Exponential 29bc7a4: prompt ranges are built before the runner turns contiguous PA off.
    plan = get_profile("fork-1.21.2").build(
        cfg({"VLLM_EXPONENTIAL_BUCKETING": "true"}, max_model_len=2000, num_hpu_blocks=1000, prefix_caching=True))
    assert max(b[1] for b in plan.prompt + plan.omitted_prompt) == 2000
    assert max(b[1] for b in plan.decode) == 1024
