"""Fork 1.17 / 1.18 profiles (tuner/buckets/legacy.py): behaviour the vectors do not pin down.

Expected values were worked out by hand from the upstream habana_model_runner.py of each tag.
"""

from __future__ import annotations

import pytest

from tuner.buckets import DEFAULT, USER, BucketConfigError, ServerConfig, get_profile

F117 = get_profile("fork-1.17")
F118 = get_profile("fork-1.18")

UPSTREAM_ASSERT = "Min. batch size cannot be greater than max. batch size."


def cfg(env=None, **kw) -> ServerConfig:
    base = dict(block_size=128, max_num_seqs=64, max_model_len=4096, max_num_batched_tokens=8192,
                num_hpu_blocks=4000)
    base.update(kw)
    return ServerConfig(env=env or {}, **base)


# -- identity and strategy ---------------------------------------------------------------------

@pytest.mark.parametrize("profile,commit", [(F117, "1e0e492"), (F118, "8492294")])
def test_identity(profile, commit):
    assert profile.engine == "v0" and profile.dims == 2
    assert profile.strategies == ("linear",) and profile.default_strategy == "linear"
    assert profile.upstream.startswith("HabanaAI/vllm-fork@v0.5.3.post1") and f"({commit})" in profile.upstream
    assert get_profile(profile.aliases[0]) is profile


@pytest.mark.parametrize("profile", [F117, F118])
def test_strategy_is_always_linear(profile):
    assert profile.select_strategy({}) == ("linear", [])
    assert profile.select_strategy({"VLLM_EXPONENTIAL_BUCKETING": "true"}) == ("linear", [])
    assert profile.strategy_env("linear") == {}
    with pytest.raises(BucketConfigError):
        profile.build(cfg(), strategy="exponential")


def test_bucket_variables():
    v17, v18 = F117.bucket_variables("linear"), F118.bucket_variables("linear")
    assert len(v17) == len(v18) == 12
    assert v17[:3] == ("VLLM_PROMPT_BS_BUCKET_MIN", "VLLM_PROMPT_BS_BUCKET_STEP", "VLLM_PROMPT_BS_BUCKET_MAX")
    assert "VLLM_DECODE_SEQ_BUCKET_MAX" in v17 and "VLLM_DECODE_BLOCK_BUCKET_MAX" not in v17
    assert "VLLM_DECODE_BLOCK_BUCKET_MAX" in v18 and "VLLM_DECODE_SEQ_BUCKET_MAX" not in v18


# -- settings and their sources ----------------------------------------------------------------

def test_settings_sources_and_defaults():
    plan = F118.build(cfg({"VLLM_PROMPT_BS_BUCKET_MAX": "16"}, max_num_seqs=128))
    s = plan.setting("VLLM_PROMPT_BS_BUCKET_MAX")
    assert (s.value, s.source) == (16, USER) and "64" in s.note  # default would have been 64
    assert plan.setting("VLLM_DECODE_BS_BUCKET_MIN").value == 32  # min(max_num_seqs, 32)
    assert plan.setting("VLLM_DECODE_BLOCK_BUCKET_MAX").value == 128 * 2048 // 128
    assert plan.setting("VLLM_DECODE_BLOCK_BUCKET_MAX").source == DEFAULT
    assert plan.setting("max_num_batched_tokens").value == 8192
    assert plan.setting("num_hpu_blocks").value == 4000
    assert [x.name for x in plan.settings[:12]] == list(F118.bucket_variables("linear"))

    p17 = F117.build(cfg(max_num_seqs=128))
    assert p17.setting("VLLM_PROMPT_BS_BUCKET_STEP").value == 32
    assert p17.setting("VLLM_DECODE_BS_BUCKET_STEP").value == 128
    assert p17.setting("VLLM_DECODE_SEQ_BUCKET_MAX").value == 2048
    assert p17.setting("num_hpu_blocks") is None  # 1.17 builds buckets before the KV cache exists
    assert not p17.ignored_settings()


def test_ignored_variables():
    env = {
        "VLLM_EXPONENTIAL_BUCKETING": "true",
        "VLLM_BUCKETING_STRATEGY": "exp",
        "VLLM_PROMPT_QUERY_BUCKET_MIN": "64",
        "VLLM_DECODE_BS_BUCKET_LIMIT": "4",
        "VLLM_CONTIGUOUS_PA": "false",
        "VLLM_DECODE_SEQ_BUCKET_MAX": "4096",
        "VLLM_DECODE_BLOCK_BUCKET_MAX": "512",
        "VLLM_SKIP_WARMUP": "false",  # not a bucket variable: not reported
    }
    p17 = F117.build(cfg(env, max_num_prefill_seqs=8))
    p18 = F118.build(cfg(env, max_num_prefill_seqs=8))
    ign17 = {s.name: s for s in p17.ignored_settings()}
    ign18 = {s.name: s for s in p18.ignored_settings()}
    common = {"VLLM_EXPONENTIAL_BUCKETING", "VLLM_BUCKETING_STRATEGY", "VLLM_PROMPT_QUERY_BUCKET_MIN",
              "VLLM_DECODE_BS_BUCKET_LIMIT", "VLLM_CONTIGUOUS_PA", "max_num_prefill_seqs"}
    assert set(ign17) == common | {"VLLM_DECODE_BLOCK_BUCKET_MAX"}
    assert set(ign18) == common | {"VLLM_DECODE_SEQ_BUCKET_MAX"}
    assert "does not read it" in ign17["VLLM_DECODE_BLOCK_BUCKET_MAX"].note
    assert "context tokens" in ign17["VLLM_DECODE_BLOCK_BUCKET_MAX"].note
    assert "blocks" in ign18["VLLM_DECODE_SEQ_BUCKET_MAX"].note
    assert "linear" in ign18["VLLM_EXPONENTIAL_BUCKETING"].note
    assert ign18["VLLM_DECODE_SEQ_BUCKET_MAX"].value == "4096"
    # ... and they really change nothing.
    for profile, plan in ((F117, p17), (F118, p18)):
        read_only = {k: v for k, v in env.items() if k in profile.bucket_variables("linear")}
        bare = profile.build(cfg(read_only))
        assert (plan.prompt, plan.decode) == (bare.prompt, bare.decode)
    assert p18.setting("VLLM_DECODE_BLOCK_BUCKET_MAX").source == USER


# -- generation details ------------------------------------------------------------------------

def test_117_keeps_values_below_min():
    env = {"VLLM_PROMPT_SEQ_BUCKET_MIN": "256", "VLLM_PROMPT_SEQ_BUCKET_MAX": "512"}
    seqs17 = sorted({s for _, s in F117.build(cfg(env)).prompt})
    seqs18 = sorted({s for _, s in F118.build(cfg(env)).prompt})
    assert seqs17 == [128, 256, 384, 512]
    assert seqs18 == [256, 384, 512]


def test_118_decode_walk_stops_past_kv_cache_and_skips_blocks_below_bs():
    plan = F118.build(cfg(num_hpu_blocks=300))  # bs [32, 64], blocks 128.. ; stop at round_up(300,128)=384
    assert plan.decode == [(32, 128), (64, 128), (32, 256), (32, 384), (64, 256), (64, 384)]
    plan = F118.build(cfg({"VLLM_DECODE_BLOCK_BUCKET_MIN": "32", "VLLM_DECODE_BLOCK_BUCKET_STEP": "32",
                           "VLLM_DECODE_BLOCK_BUCKET_MAX": "64"}))
    assert plan.decode == [(32, 32), (32, 64), (64, 64)]


def test_118_omitted_and_log_lines():
    plan = F118.build(cfg(max_num_seqs=8, max_num_batched_tokens=2048, num_hpu_blocks=2000,
                          env={"VLLM_PROMPT_BS_BUCKET_STEP": "2"}))
    # bs [1, 2, 4, 6, 8] x seq [128..1024]: 4 + 6 + 6 buckets exceed 2048 tokens.
    assert all(b * s > 2048 for b, s in plan.omitted_prompt) and len(plan.omitted_prompt) == 16
    assert plan.omitted_prompt == sorted(plan.omitted_prompt)
    assert all(b * s <= 2048 for b, s in plan.prompt)
    # The 1.18 bug: the key name is printed where the default should be.
    assert plan.log_lines[0] == "VLLM_PROMPT_BS_BUCKET_MIN=1 (default:min)"
    assert plan.log_lines[1] == "VLLM_PROMPT_BS_BUCKET_STEP=2 (default:step)"
    assert plan.log_lines[12] == "Prompt bucket config (min, step, max_warmup) bs:[1, 2, 8], seq:[128, 128, 1024]"
    assert plan.log_lines[13] == "Decode bucket config (min, step, max_warmup) bs:[8, 8, 8], block:[128, 128, 128]"
    assert len(plan.log_lines) == 14 and not plan.warnings
    warmup = plan.warmup_log_lines
    assert warmup[0].startswith(f"Generated {len(plan.prompt)} prompt buckets [bs, seq]: [(1, 128), (1, 256)")
    assert warmup[1] == "Omitted 16 prompt buckets due to exceeded token budget (max_num_batched_tokens=2048)"
    assert warmup[2] == "Generated 1 decode buckets [bs, total_blocks]: [(8, 128)]"


def test_117_log_lines_sorted_lexicographically():
    plan = F117.build(cfg(max_num_seqs=2))
    assert plan.prompt[:3] == [(1, 128), (2, 128), (1, 256)]  # release order: by tokens
    assert plan.log_lines[1].startswith("Generated 16 prompt buckets: [(1, 128), (1, 256), (1, 384)")
    assert plan.log_lines[3].startswith("Generated 32 decode buckets: [(1, 128)")


def test_118_token_budget_too_small_warns_and_keeps_everything():
    plan = F118.build(cfg(max_num_seqs=4, max_num_batched_tokens=100))
    msg = ("The current bucketing configuration (min, step, max_warmup): bs:[1, 4, 4], seq:[128, 128, 1024] "
           "cannot be used with specified max_num_batched_tokens (100), as the smallest bucket (128) would "
           "exceed token budget. Please increase max_num_batched_tokens or decrease bucket minimum Ignoring "
           "max_num_batched_tokens at risk of out-of-memory errors.")
    assert plan.warnings == [msg]
    assert plan.log_lines[-1] == msg
    assert len(plan.prompt) == 24 and plan.omitted_prompt == []


# -- errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("profile", [F117, F118])
def test_non_integer_env(profile):
    with pytest.raises(BucketConfigError) as info:
        profile.build(cfg({"VLLM_PROMPT_SEQ_BUCKET_STEP": "12x"}))
    assert info.value.variable == "VLLM_PROMPT_SEQ_BUCKET_STEP"


@pytest.mark.parametrize("profile", [F117, F118])
def test_min_greater_than_max(profile):
    with pytest.raises(BucketConfigError) as info:
        profile.build(cfg({"VLLM_DECODE_BS_BUCKET_MIN": "128", "VLLM_DECODE_BS_BUCKET_MAX": "64"}))
    assert info.value.variable == "VLLM_DECODE_BS_BUCKET_MIN"
    assert UPSTREAM_ASSERT in str(info.value)


def test_default_min_can_exceed_user_max_on_118():
    # The 1.18 default block min is 128; a smaller user max trips the release's own assertion.
    with pytest.raises(BucketConfigError) as info:
        F118.build(cfg({"VLLM_DECODE_BLOCK_BUCKET_MAX": "64"}))
    assert info.value.variable == "VLLM_DECODE_BLOCK_BUCKET_MIN"


@pytest.mark.parametrize("profile", [F117, F118])
@pytest.mark.parametrize("var,value", [("VLLM_PROMPT_BS_BUCKET_STEP", "0"), ("VLLM_PROMPT_BS_BUCKET_MIN", "0")])
def test_degenerate_step_or_min(profile, var, value):
    with pytest.raises(BucketConfigError) as info:
        profile.build(cfg({var: value}))
    assert info.value.variable == var


def test_118_empty_prompt_range():
    # MIN=3 >= STEP=2 and no multiple of 2 in [3, 3]: 1.18 drops everything and cannot build buckets.
    with pytest.raises(BucketConfigError) as info:
        F118.build(cfg({"VLLM_PROMPT_BS_BUCKET_MIN": "3", "VLLM_PROMPT_BS_BUCKET_STEP": "2",
                        "VLLM_PROMPT_BS_BUCKET_MAX": "3"}))
    assert info.value.variable == "VLLM_PROMPT_BS_BUCKET_MIN"
    assert "No buckets could be captured" in str(info.value)
    assert F117.build(cfg({"VLLM_PROMPT_BS_BUCKET_MIN": "3", "VLLM_PROMPT_BS_BUCKET_STEP": "2",
                           "VLLM_PROMPT_BS_BUCKET_MAX": "3"})).prompt[0] == (2, 128)


# -- padding -----------------------------------------------------------------------------------

def test_117_pad_prompt():
    plan = F117.build(cfg())  # bs (1, 32, 64), seq (128, 128, 1024)
    r = F117.pad_prompt(plan, 3, 200)
    assert (r.requested, r.bucket, r.warmed, r.warning) == ((3, 200), (4, 256), True, None)
    assert F117.pad_prompt(plan, 33, 5).bucket == (64, 128)  # never below one block
    assert F117.pad_prompt(plan, 1, 100, ctx=2).bucket == (1, 384)  # cached prefix still in the shape
    r = F117.pad_prompt(plan, 65, 1025)  # beyond both maxima: same rule, not warmed
    assert (r.bucket, r.warmed) == ((96, 1152), False)
    # 1.17 ignores MIN when padding: a single prompt runs at bs 1, which was never warmed.
    plan = F117.build(cfg({"VLLM_PROMPT_BS_BUCKET_MIN": "4"}))
    r = F117.pad_prompt(plan, 1, 128)
    assert (r.bucket, r.warmed) == ((1, 128), False)


def test_117_pad_decode_uses_block_table_width():
    plan = F117.build(cfg())  # decode bs (1, 128, 64), seq (128, 128, 2048)
    assert F117.pad_decode(plan, 3, 5).bucket == (4, 128)
    r = F117.pad_decode(plan, 64, 2049)
    assert (r.bucket, r.warmed) == ((64, 2176), False)
    # A coarser SEQ step changes what is warmed, not how the runtime shape is rounded.
    plan = F117.build(cfg({"VLLM_DECODE_SEQ_BUCKET_STEP": "256"}))
    r = F117.pad_decode(plan, 1, 300)
    assert (r.bucket, r.warmed) == ((1, 384), False)


def test_118_pad_prompt():
    plan = F118.build(cfg())  # bs (1, 32, 64), seq (128, 128, 1024), T 8192
    assert F118.pad_prompt(plan, 3, 129).bucket == (4, 256)
    assert F118.pad_prompt(plan, 33, 128).bucket == (64, 128)
    r = F118.pad_prompt(plan, 16, 1000)  # a real bucket shape, but omitted by the token budget
    assert (r.bucket, r.warmed) == ((16, 1024), False)
    plan = F118.build(cfg({"VLLM_PROMPT_BS_BUCKET_MIN": "4"}))
    assert F118.pad_prompt(plan, 1, 128).bucket == (4, 128)  # 1.18 never pads below MIN
    plan = F118.build(cfg({"VLLM_PROMPT_SEQ_BUCKET_STEP": "1024"}))
    # The power-of-two candidate is MIN * next_pow2(v) (128 * 512 here), not the smallest MIN * 2^k >= v,
    # so for token lengths it never wins and the STEP multiple is taken.
    assert F118.pad_prompt(plan, 1, 300).bucket == (1, 1024)


def test_118_pad_decode_counts_padding_sequences_blocks():
    plan = F118.build(cfg(num_hpu_blocks=1000))  # decode bs (32, 32, 64), blocks (128, 128, 1024)
    # One sequence with 10 blocks is padded with 31 copies of itself: 320 blocks -> 384.
    r = F118.pad_decode(plan, 1, 10)
    assert (r.requested, r.bucket, r.warmed) == ((1, 10), (32, 384), True)
    assert F118.pad_decode(plan, 32, 100).bucket == (32, 128)
    # Beyond the KV cache: not capped at num_hpu_blocks on 1.18, just not warmed.
    r = F118.pad_decode(plan, 64, 1500)
    assert (r.bucket, r.warmed) == ((64, 1536), False)


@pytest.mark.parametrize("profile", [F117, F118])
def test_pad_rejects_foreign_plan_and_bad_shapes(profile):
    other = (F118 if profile is F117 else F117).build(cfg())
    with pytest.raises(ValueError):
        profile.pad_prompt(other, 1, 128)
    plan = profile.build(cfg())
    with pytest.raises(BucketConfigError):
        profile.pad_decode(plan, 0, 128)
    with pytest.raises(BucketConfigError):
        profile.pad_prompt(plan, 1, 128, ctx=-1)
