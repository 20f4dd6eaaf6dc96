"""The lines a hybrid model's start logs about its KV pool (tuner/perfmodel/hybridcache.py), worded as vLLM's
platform (platforms/interface.py _align_hybrid_block_size) and vllm-gaudi's platform.py and hpu_worker.py print
them."""

from __future__ import annotations

from ..perfmodel.hybridcache import GDN_KINDS, GRANITE_HYBRID, KERNEL_BLOCK, QWEN3_5, HybridLayout
from .logfmt import format_bytes as fb


def alignment_lines(layout: HybridLayout) -> list[str]:
    """The platform's block and page alignment, as the engine starts."""
    lines, block_size = [], layout.asked_block_size
    if layout.model_type in QWEN3_5 and block_size != KERNEL_BLOCK:  # platform.py check_and_update_config
        lines.append(f"Resetting Qwen3.5 hybrid block_size from {block_size} to {KERNEL_BLOCK} before Gaudi hybrid "
                     "page-size realignment.")
    if layout.model_type == GRANITE_HYBRID:
        lines.append(f"Setting granitemoehybrid block_size to {layout.attn_block_tokens} tokens (alignment="
                     f"{layout.alignment}, mamba_page_size={layout.state_bytes} bytes, "
                     f"prefix_caching={layout.alignment != 16}).")
    elif layout.attn_block_tokens > (KERNEL_BLOCK if layout.model_type in QWEN3_5 else block_size):
        lines.append(f"Setting attention block size to {layout.attn_block_tokens} tokens to ensure that attention "
                     "page size is >= mamba page size.")
    if layout.page_bytes != layout.state_bytes:
        lines.append(f"Padding mamba page size by {layout.padding_pct:.2f}% to ensure that mamba page size and "
                     "attention page size are exactly equal.")
    return lines


def runner_line(layout: HybridLayout, env: dict) -> str | None:
    """The runner's line for a Gated DeltaNet model, with the cache modes it sets where the user set none."""
    if layout.state_kind not in GDN_KINDS:
        return None
    shown = {name: env.get(name) or default for name, default in (
        ("VLLM_USE_HYBRID_CACHE", "1"), ("VLLM_USE_NAIVE_MAMBA_CACHE_SHARING", "0"), ("VLLM_COMPACT_GDN", "1"))}
    return f"GDN layers detected ({layout.state_layers}): " + ", ".join(f"{k}={v}" for k, v in shown.items())


def memory_line(layout: HybridLayout, available: float) -> str | None:
    """The worker's cut of the KV memory for separately allocated states (None when it makes none)."""
    f = layout.hpu_factor
    if f >= 1.0:
        return None
    if layout.state_kind in GDN_KINDS:
        return (f"HPU hybrid cache: reducing available KV cache memory by {(1 - f) * 100:.1f}% (factor={f:.3f}) "
                f"for separate per-spec allocations (padded_page={fb(layout.page_bytes)}, "
                f"real_attn={fb(layout.page_bytes)}, real_mamba={fb(layout.state_bytes)}).")
    return (f"Hybrid model (standard Mamba2 + ATN): adjusted usable KV cache from {fb(available)} to "
            f"{fb(int(available * f))} (attn_page={layout.page_bytes}, mamba_state={layout.state_bytes}, "
            f"ratio={f:.3f})")
