"""Parameter counts of the DeepSeek lineage's attention: multi-head latent attention (MLA) with the sparse-
attention indexer of DeepSeek-V3.2, GLM-5 and HY-V4, DeepSeek-V4's compressed attention, and the hyper-
connections V4 and HY-V4 wrap each block in. Counted as transformers' modules build them, and where vLLM 0.32
builds less, as vLLM does (named below)."""

from __future__ import annotations

from .hfconfig import TextConfig


def _n(r: dict, key: str, default: int = 0) -> int:
    value = r.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def is_deepseek_v4(t: TextConfig) -> bool:
    """DeepSeek-V4's attention: one shared KV head of head_dim, grouped low-rank output (o_lora_rank)."""
    return t.model_type.startswith("deepseek_v4") or ("o_lora_rank" in t.raw and "o_groups" in t.raw)


def mla(t: TextConfig, i: int) -> int:
    """Layer i's latent attention (DeepseekV2/V3Attention): q through its LoRA (q_a, norm, q_b) or one projection,
    the joint KV down-projection with the shared RoPE key, its norm, the KV up-projection and the out-projection;
    then the indexer where the layer has one and HY-V4's output gate and sinks."""
    r, h, heads = t.raw, t.hidden, t.heads
    rope, nope = _n(r, "qk_rope_head_dim"), _n(r, "qk_nope_head_dim")
    v_dim, lora, q_lora = _n(r, "v_head_dim") or nope, _n(r, "kv_lora_rank"), _n(r, "q_lora_rank")
    q = (h * q_lora + q_lora + q_lora * heads * (nope + rope)) if q_lora else h * heads * (nope + rope)
    kv = h * (lora + rope) + lora + lora * heads * (nope + v_dim)
    n = q + kv + heads * v_dim * h
    if r.get("attention_bias"):  # q_a (not a plain q_proj), kv_a and o carry biases
        n += q_lora + lora + rope + h
    if has_indexer(t, i):
        n += indexer(t)
    if t.model_type.startswith("hy_v4"):
        n += _hy_v4_gate_and_sinks(t, v_dim)
    return n


def has_indexer(t: TextConfig, i: int) -> bool:
    """Whether layer i runs its own DSA indexer (vLLM: a config with index_topk; IndexCache's shared layers
    reuse the previous one's top-k and build none): `indexer_types` "shared" (transformers 5, vLLM's HY-V4),
    else `index_topk_pattern` "S", else the `index_topk_freq` schedule from `index_skip_topk_offset`."""
    r = t.raw
    if r.get("index_topk") is None:
        return False
    kinds, pattern = r.get("indexer_types"), r.get("index_topk_pattern")
    if isinstance(kinds, list) and i < len(kinds):
        return kinds[i] != "shared"
    if isinstance(pattern, (str, list)) and i < len(pattern):
        return pattern[i] != "S"
    freq, offset = max(_n(r, "index_topk_freq", 1), 1), _n(r, "index_skip_topk_offset", 2)
    return max(i - offset + 1, 0) % freq == 0


def indexer(t: TextConfig) -> int:
    """The DSA lightning indexer (DeepseekV32Indexer, vLLM's Indexer): queries from the q LoRA, one key head
    with a LayerNorm (weight and bias), and per-head weights."""
    r, h = t.raw, t.hidden
    heads, d = _n(r, "index_n_heads", 64), _n(r, "index_head_dim", 128)
    return _n(r, "q_lora_rank") * heads * d + h * d + 2 * d + h * heads


def _hy_v4_gate_and_sinks(t: TextConfig, v_dim: int) -> int:
    """HY-V4's gated MLA (a gate per head, or per value element) and per-head sinks, as vLLM's HYV4Config
    defaults them (gated_mla, gating_type elementwise, learnable_sink: all on)."""
    r, h, heads = t.raw, t.hidden, t.heads
    n = 0
    if r.get("gated_mla", True):
        n += h * heads * (1 if r.get("gating_type") == "headwise" else v_dim)
    if r.get("learnable_sink", True):
        n += heads
    return n


def _compress_ratio(t: TextConfig, i: int) -> int:
    """Layer i's KV compression (vLLM: compress_ratios, 0 or 1 none; transformers 5: layer_types through
    compress_rates, a sliding layer none)."""
    r = t.raw
    ratios = r.get("compress_ratios")
    if isinstance(ratios, list) and i < len(ratios):
        return max(1, int(ratios[i] or 0))
    kinds, rates = r.get("layer_types"), r.get("compress_rates")
    if isinstance(kinds, list) and i < len(kinds) and isinstance(rates, dict):
        return max(1, int(rates.get(kinds[i]) or 0))
    return 1


def deepseek_v4_attention(t: TextConfig, i: int) -> int:
    """DeepSeek-V4's attention (DeepseekV4Attention; vLLM's DeepseekV4 attention, compressor and indexer): per-head
    sinks, q through its LoRA and norm, one KV head of head_dim with its norm, the grouped low-rank output
    (o_a per group, o_b), and on compressed layers a compressor (KV and gate projections, position bias, norm;
    doubled for the overlapping ratio-4 windows), whose ratio-4 layers add an indexer with a compressor of its
    own at index_head_dim."""
    r, h, heads = t.raw, t.hidden, t.heads
    d, q_lora = _n(r, "head_dim", 512), _n(r, "q_lora_rank")
    groups, o_lora = _n(r, "o_groups", 8), _n(r, "o_lora_rank", 1024)
    n = heads + h * q_lora + q_lora + q_lora * heads * d + h * d + d
    n += heads * d * o_lora + groups * o_lora * h  # o_a: (heads x d / groups) -> o_lora, per group
    ratio = _compress_ratio(t, i)
    if ratio > 1:
        n += _compressor(h, d, ratio)
    if ratio == 4:
        index_heads, index_d = _n(r, "index_n_heads", 64), _n(r, "index_head_dim", 128)
        n += _compressor(h, index_d, ratio) + q_lora * index_heads * index_d + h * index_heads
    return n


def _compressor(h: int, d: int, ratio: int) -> int:
    width = (2 if ratio == 4 else 1) * d  # ratio 4 compresses overlapping windows: two halves
    return 2 * h * width + ratio * width + d


def hyper_connections(t: TextConfig) -> tuple[int, int]:
    """(per layer, once) of the hyper-connections that mix hc_mult residual streams: around attention and around
    the MLP each a mixing projection from all streams, its bias and scales, and a head merging the streams.
    DeepSeek-V4 (DeepseekV4HyperConnection): (2 + m) x m mixes, 3 scales. HY-V4 (HYV4HyperConnection): 2 x m
    mixes, 2 scales, and only with enable_ihc (vLLM's HYV4Config: on by default)."""
    r, h = t.raw, t.hidden
    m = _n(r, "hc_mult")
    if not m:
        return 0, 0
    if is_deepseek_v4(t):
        mixes, scales = (2 + m) * m, 3
    elif t.model_type.startswith("hy_v4") and r.get("enable_ihc", True):
        mixes, scales = 2 * m, 2
    else:
        return 0, 0
    per_block = mixes * m * h + mixes + scales
    return 2 * per_block, m * m * h + m + 1
