"""The KV cache of a hybrid model (attention layers beside Gated DeltaNet / Mamba layers) as vllm-gaudi lays it
out, pure.

A recurrent layer keeps one fixed-size state per sequence (tuner/models/recurrent.py); vLLM keeps it in the same
block pool as the attention layers' K and V, so every layer's page must be the same size:

* the attention block grows until one attention page holds a state (vLLM's Platform._align_hybrid_block_size:
  S = kernel block x ceil(state / (kernel block x attention bytes per token)); the HPU kernel block is 128),
  and the state page is padded to it (P = S x attention bytes per token);
* the layers are grouped, as many per group as the rarer kind has (kv_cache_utils'
  _get_kv_cache_groups_uniform_page_size), and a block costs one page per layer of a group: G x P;
* vllm-gaudi then allocates the attention K/V and the states as separate tensors, each as large as the pool,
  so before the block count is taken it tells vLLM only P / (P + state) of its KV memory (hpu_worker.py's
  "HPU hybrid cache: reducing available KV cache memory" and "Hybrid model (standard Mamba2 + ATN)" lines;
  VLLM_COMPACT_GDN=1 keeps Gated DeltaNet states in a small tensor of their own instead);
* a running sequence holds ceil(length / S) blocks of the attention group and one block in each state group
  (two with prefix caching, vLLM's mamba_cache_mode "align").

Sources: vllm-gaudi v0.26.0 and main @091bbadd (platform.py check_and_update_config and
update_block_size_for_backend, v1/worker/hpu_worker.py determine_available_memory, v1/worker/hpu_model_runner.py
initialize_kv_cache); vLLM 0.32 (platforms/interface.py, v1/core/kv_cache_utils.py, v1/kv_cache_interface.py).
Releases before the plugin's Qwen3.5 enablement (v0.18) do not serve these models and keep the attention-only
account.
"""

from __future__ import annotations

from dataclasses import dataclass

KERNEL_BLOCK = 128  # the HPU attention backend's one supported kernel block size
HYBRID_RELEASES = ("gaudi-0.26.0", "gaudi-main")
# vllm-gaudi's _GDN_MAMBA_TYPES (contiguous state tensors, compact by default); vLLM files KDA layers under the
# Gated DeltaNet backend (MambaAttentionBackendEnum.GDN_ATTN), so they are among them
GDN_KINDS = ("gdn_attention", "linear_attention", "kda")
QWEN3_5 = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
GRANITE_HYBRID = "granitemoehybrid"


@dataclass(frozen=True)
class HybridLayout:
    attn_block_tokens: int  # S: tokens in one block of the attention layers (the KV manager's block size)
    page_bytes: int  # P: one layer's page of a block (an attention block, or a padded state)
    state_bytes: int  # one recurrent layer's state for one sequence, unpadded
    attn_token_bytes: int  # K and V of one attention layer for one token, on one rank
    group_size: int  # G: layers per KV cache group
    attention_groups: int
    state_groups: int
    state_kind: str
    compact: bool = False  # VLLM_COMPACT_GDN=1: the states live apart, the pool is not cut for them
    model_type: str = ""
    alignment: int = KERNEL_BLOCK  # the block's token step (Granite 4.0-H: 16, or 256 with prefix caching)
    state_layers: int = 0
    spec_blocks: int = 0  # speculative decoding: a state block per draft token (MambaSpec.num_speculative_blocks)
    asked_block_size: int = KERNEL_BLOCK  # --block-size as the server was told it (a Qwen3.5 hybrid's is reset)

    @property
    def kernel_block(self) -> int:
        """Tokens of one block of the attention tensors as allocated: a Gated DeltaNet hybrid's HPU kernel splits
        the KV block into 128-token ones; other hybrids run it whole."""
        return KERNEL_BLOCK if self.state_kind in GDN_KINDS else self.attn_block_tokens

    @property
    def bucket_block_size(self) -> int:
        """The block the runner buckets by: a Gated DeltaNet hybrid keeps its --block-size (a Qwen3.5 one the 128
        it is reset to) and splits the larger KV block into kernel blocks; another hybrid's runner takes the KV
        block itself (hpu_model_runner.initialize_kv_cache, Granite 4.0-H, NemotronH)."""
        if self.state_kind in GDN_KINDS:
            return KERNEL_BLOCK if self.model_type in QWEN3_5 else self.asked_block_size
        return self.attn_block_tokens

    @property
    def block_bytes(self) -> int:
        """What vLLM counts one block as: a page for each layer of the largest group."""
        return self.group_size * self.page_bytes

    @property
    def hpu_factor(self) -> float:
        """The share of the KV memory vllm-gaudi passes on to vLLM: attention and states are separate tensors."""
        if self.compact:
            return 1.0
        return self.page_bytes / (self.page_bytes + self.state_bytes)

    @property
    def padding_pct(self) -> float:
        return 100.0 * (self.page_bytes - self.state_bytes) / self.state_bytes

    def num_blocks(self, kv_bytes: float) -> int:
        """vLLM's block count for this much KV memory (hpu_worker's int(), then available // bytes per block)."""
        if kv_bytes <= 0:
            return 0
        return int(kv_bytes * self.hpu_factor) // self.block_bytes

    def compact_tensor_bytes(self, max_num_seqs: int) -> int:
        """One compact state tensor: a slot per request per state group, and two spare (hpu_model_runner's
        max_reqs x groups + 2); 0 when the states live in the pool."""
        return (max_num_seqs * self.state_groups + 2) * self.state_bytes if self.compact else 0

    def compact_bytes(self, max_num_seqs: int) -> int:
        """The compact state tensors, one per layer slot of a group, allocated beside the pool (not out of it)."""
        return self.group_size * self.compact_tensor_bytes(max_num_seqs)

    def state_blocks_per_request(self, prefix_caching: bool = False) -> int:
        return self.state_groups * ((2 if prefix_caching else 1) + self.spec_blocks)

    def blocks_per_request(self, tokens: int, prefix_caching: bool = False) -> int:
        """Blocks one request of `tokens` holds (vLLM's get_max_concurrency_for_kv_cache_config)."""
        return (self.attention_groups * -(-tokens // self.attn_block_tokens)
                + self.state_blocks_per_request(prefix_caching))

    def max_concurrency(self, num_blocks: int, max_model_len: int, prefix_caching: bool = False) -> float:
        per = self.blocks_per_request(max_model_len, prefix_caching)
        return num_blocks / per if per else 0.0

    def kv_tokens(self, num_blocks: int, max_model_len: int, prefix_caching: bool = False) -> int:
        """vLLM's "KV cache size: N tokens" (get_kv_cache_capacity): max concurrency x max_model_len."""
        return int(self.max_concurrency(num_blocks, max_model_len, prefix_caching) * max_model_len)


def group_split(attention: int, states: int) -> tuple[int, int, int]:
    """(layers per group, attention groups, state groups): the rarer kind's count per group, or the larger
    one's when it is less than 1.5 times it (fewer padding layers)."""
    size = min(attention, states)
    if max(attention, states) < size * 1.5:
        size = max(attention, states)
    return size, -(-attention // size), -(-states // size)


def hybrid_layout(release: str, model_type: str, attention_layers: int, attn_token_bytes: int,
                  state_layers: int, state_bytes: int, state_kind: str, block_size: int = KERNEL_BLOCK,
                  prefix_caching: bool = False, compact_gdn: bool = False, spec_tokens: int = 0) -> HybridLayout | None:
    """The layout on `release`, None where the release keeps the attention-only account (no recurrent layers,
    an attention-free model, a release before hybrid support). `attn_token_bytes`: one attention layer's K and
    V for one token on one rank (vLLM's model-wide head count and size); `block_size`: --block-size, or the
    plugin's 128."""
    if release not in HYBRID_RELEASES or state_layers <= 0 or attention_layers <= 0 or state_bytes <= 0:
        return None
    asked = block_size
    if model_type == GRANITE_HYBRID:
        # vllm-gaudi's own rule for Granite 4.0-H: a block of 16-token steps (mamba_d_chunk with prefix
        # caching), and the attention kernel runs at that block size
        align = 256 if prefix_caching else 16
        tokens = align * -(-state_bytes // (align * attn_token_bytes))
    else:
        if model_type in QWEN3_5:
            block_size = KERNEL_BLOCK  # the plugin resets a Qwen3.5 hybrid's --block-size to 128
        align = max(KERNEL_BLOCK, block_size)
        tokens = max(block_size, align * -(-state_bytes // (align * attn_token_bytes)))
    size, attn_groups, state_groups = group_split(attention_layers, state_layers)
    return HybridLayout(attn_block_tokens=tokens, page_bytes=tokens * attn_token_bytes, state_bytes=state_bytes,
                        attn_token_bytes=attn_token_bytes, group_size=size, attention_groups=attn_groups,
                        state_groups=state_groups, state_kind=state_kind,
                        compact=compact_gdn and state_kind in GDN_KINDS,
                        model_type=model_type, alignment=align, state_layers=state_layers, spec_blocks=spec_tokens,
                        asked_block_size=asked)
