"""A hybrid model's KV pool as vllm-gaudi lays it out (tuner/perfmodel/hybridcache.py): the figures are worked
by hand from the rules of vLLM's _align_hybrid_block_size / _get_kv_cache_groups_uniform_page_size /
get_max_concurrency_for_kv_cache_config and the plugin's platform.py and hpu_worker.py."""

import pytest

from tuner.perfmodel.hybridcache import group_split, hybrid_layout

# Qwen3.5-35B-A3B at TP 1: 10 full-attention layers of 2 KV heads x 256 in bf16 (2,048 bytes a token), 30 Gated
# DeltaNet layers whose state is a (3, 8192) bf16 conv state and a (32, 128, 128) float32 recurrent one.
QWEN35_MOE_STATE = 3 * 8192 * 2 + 32 * 128 * 128 * 4  # 2,146,304 bytes


def qwen35_moe(**kw):
    args = dict(release="gaudi-main", model_type="qwen3_5_moe_text", attention_layers=10, attn_token_bytes=2048,
                state_layers=30, state_bytes=QWEN35_MOE_STATE, state_kind="gdn_attention")
    args.update(kw)
    return hybrid_layout(**args)


def test_the_attention_block_grows_until_a_page_holds_a_state():
    h = qwen35_moe()
    # 2,146,304 / (128 x 2,048) = 8.19 -> 9 kernel blocks: the 1,152-token block vllm-gaudi PR #1303 names
    assert h.attn_block_tokens == 1152
    assert h.page_bytes == 1152 * 2048 == 2_359_296
    assert h.kernel_block == 128  # the HPU kernel still runs 128-token blocks (virtual block splitting)
    assert round(h.padding_pct, 2) == 9.92


def test_layers_grouped_by_the_rarer_kind_and_a_block_costs_a_page_per_layer_of_a_group():
    h = qwen35_moe()
    assert (h.group_size, h.attention_groups, h.state_groups) == (10, 1, 3)
    assert h.block_bytes == 10 * 2_359_296


@pytest.mark.parametrize("attention, states, expected", [
    (16, 48, (16, 1, 3)),  # Qwen3.5-27B
    (12, 36, (12, 1, 3)),  # Qwen3-Next-80B
    (6, 23, (6, 1, 4)),  # a NemotronH-like pattern: the last state group padded
    (13, 12, (13, 1, 1)),  # close counts: the larger one, fewer padding layers
    (12, 17, (17, 1, 1)),  # 17 < 1.5 x 12: still the larger one
    (12, 18, (12, 1, 2)),  # 18 >= 1.5 x 12: the smaller one
])
def test_group_split(attention, states, expected):
    assert group_split(attention, states) == expected


def test_the_plugin_passes_on_the_share_its_separate_state_tensors_leave():
    h = qwen35_moe()
    assert h.hpu_factor == pytest.approx(2_359_296 / (2_359_296 + QWEN35_MOE_STATE))  # 0.524
    kv = 50e9
    assert h.num_blocks(kv) == int(kv * h.hpu_factor) // h.block_bytes == 1109
    # VLLM_COMPACT_GDN=1 keeps the states in a small tensor of their own: the pool is not cut
    compact = qwen35_moe(compact_gdn=True)
    assert compact.hpu_factor == 1.0 and compact.num_blocks(kv) == int(kv) // compact.block_bytes == 2119


def test_capacity_counts_a_requests_attention_blocks_and_one_block_per_state_group():
    h = qwen35_moe()
    # 32,768 tokens: ceil(32768 / 1152) = 29 attention blocks + 3 state blocks = 32 a request
    assert h.blocks_per_request(32768) == 32
    assert h.max_concurrency(1109, 32768) == pytest.approx(1109 / 32)
    assert h.kv_tokens(1109, 32768) == int(1109 / 32 * 32768) == 1_135_616
    # prefix caching (vLLM's mamba_cache_mode "align"): two blocks per state group
    assert h.blocks_per_request(32768, prefix_caching=True) == 29 + 6


def test_a_qwen35_hybrids_block_size_is_reset_to_the_kernels_and_others_align_to_theirs():
    assert qwen35_moe(block_size=256).attn_block_tokens == 1152  # platform.py resets Qwen3.5 to 128 first
    # another GDN hybrid keeps --block-size 256: the alignment steps by 256 (2,146,304 / (256 x 2,048) -> 5)
    other = qwen35_moe(model_type="qwen3_next", block_size=256)
    assert other.attn_block_tokens == 1280 and other.page_bytes == 1280 * 2048


def test_granite_hybrid_uses_the_plugins_own_block_rule_and_runs_its_kernel_at_it():
    # granitemoehybrid: a 16-token step without prefix caching, 256 with it (mamba_d_chunk's default)
    g = hybrid_layout("gaudi-main", "granitemoehybrid", attention_layers=4, attn_token_bytes=4096,
                      state_layers=36, state_bytes=2_000_000, state_kind="mamba2")
    assert g.attn_block_tokens == 16 * -(-2_000_000 // (16 * 4096)) == 496
    assert g.kernel_block == 496 and g.alignment == 16
    pc = hybrid_layout("gaudi-main", "granitemoehybrid", attention_layers=4, attn_token_bytes=4096,
                       state_layers=36, state_bytes=2_000_000, state_kind="mamba2", prefix_caching=True)
    assert pc.attn_block_tokens == 512 and pc.alignment == 256
    # a Mamba2 hybrid's pool is cut by attention page / (page + state) as well ("standard Mamba2 + ATN")
    assert g.hpu_factor == pytest.approx(496 * 4096 / (496 * 4096 + 2_000_000))


@pytest.mark.parametrize("release", ["gaudi-0.15.1", "gaudi-0.10.1", "fork-1.22"])
def test_releases_before_hybrid_support_keep_the_attention_only_account(release):
    assert qwen35_moe(release=release) is None


def test_no_layout_without_both_kinds_of_layers():
    assert qwen35_moe(state_layers=0) is None
    assert qwen35_moe(attention_layers=0) is None


def test_kda_layers_are_handled_as_gated_deltanet_ones():
    # vLLM's KDA layers report the Gated DeltaNet backend as their mamba_type: the plugin keeps them compact
    kda = qwen35_moe(model_type="kimi_linear", state_kind="kda", compact_gdn=True)
    assert kda.compact and kda.hpu_factor == 1.0 and kda.kernel_block == 128
    mamba2 = qwen35_moe(model_type="nemotron_h", state_kind="mamba2", compact_gdn=True)
    assert not mamba2.compact and mamba2.hpu_factor < 1 and mamba2.kernel_block == mamba2.attn_block_tokens
