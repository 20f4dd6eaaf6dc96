"""Parameter counts of the mixers that keep a state per sequence instead of a KV cache: Mamba1 and Mamba2,
Gated DeltaNet (Qwen3-Next, Qwen3.5, OLMo-hybrid), Kimi Delta Attention (Kimi-Linear) and MiniMax's lightning
attention. Each is counted as transformers' module builds it; params.py calls `mixer` for a layer whose kind is
linear or mamba."""

from __future__ import annotations

from .hfconfig import TextConfig


def int_of(r: dict, names: tuple[str, ...], default: int | None = None) -> int | None:
    """The first of `names` the config gives as a number."""
    return next((int(r[n]) for n in names if isinstance(r.get(n), (int, float)) and not isinstance(r[n], bool)),
                default)


def flag_of(r: dict, names: tuple[str, ...], default: bool) -> bool:
    return next((bool(r[n]) for n in names if r.get(n) is not None), default)


def mixer(t: TextConfig) -> int:
    """A linear-attention or Mamba layer's mixer, by the keys its family writes."""
    r = t.raw
    if t.model_type.startswith("kimi") or isinstance(r.get("linear_attn_config"), dict):
        return kimi_delta_attention(t)
    if t.model_type.startswith("minimax"):
        return lightning_attention(t)
    m = mamba(t)
    return gated_deltanet(t) if m is None or "linear_num_key_heads" in r else m


def gated_deltanet(t: TextConfig) -> int:
    """Gated DeltaNet (Qwen3NextGatedDeltaNet, Qwen3_5GatedDeltaNet): in-projections to q, k, v, the output gate z
    and the b, a terms (fused or not, the same count), a causal conv over q, k and v, per-head dt bias and A, a
    gated norm of one value head, and the out-projection."""
    r, h = t.raw, t.hidden
    nk, dk = int(r.get("linear_num_key_heads") or 16), int(r.get("linear_key_head_dim") or 128)
    nv, dv = int(r.get("linear_num_value_heads") or 32), int(r.get("linear_value_head_dim") or 128)
    kernel = int(r.get("linear_conv_kernel_dim") or 4)
    qkvz = h * (2 * nk * dk + 2 * nv * dv)
    ba = h * 2 * nv
    conv = (2 * nk * dk + nv * dv) * kernel
    return qkvz + ba + conv + 2 * nv + dv + nv * dv * h


def kimi_delta_attention(t: TextConfig) -> int:
    """Kimi Delta Attention (transformers' KimiLinear KDA layer, vLLM's KimiGatedDeltaNetAttention): q, k and v
    projections, a short conv over each, a low-rank forget gate (f_a, f_b) with per-channel dt bias and per-head
    A, the beta projection, a low-rank output gate (g_a, g_b), a norm of one head and the out-projection. The
    sizes are transformers 5's flat keys or the original `linear_attn_config`."""
    r, h = t.raw, t.hidden
    kda = r.get("linear_attn_config") if isinstance(r.get("linear_attn_config"), dict) else {}
    heads = int_of(r, ("linear_num_heads",)) or int_of(kda, ("num_heads",)) or t.heads
    d = int_of(r, ("linear_head_dim",)) or int_of(kda, ("head_dim",)) or 128
    kernel = int_of(r, ("linear_conv_kernel_dim",)) or int_of(kda, ("short_conv_kernel_size",)) or 4
    width = heads * d
    qkv, conv = 3 * h * width, 3 * width * kernel
    gates = 2 * (h * d + d * width)  # forget gate f_a/f_b and output gate g_a/g_b
    return qkv + conv + gates + width + heads + h * heads + d + width * h


def lightning_attention(t: TextConfig) -> int:
    """MiniMax-01's lightning (linear) attention (MiniMaxLightningAttention): a fused q, k, v projection, an
    output gate, a norm over all heads and the out-projection."""
    r, h = t.raw, t.hidden
    width = t.heads * (int(r.get("head_dim") or 0) or h // t.heads)
    return 3 * h * width + h * width + width + width * h


def mamba(t: TextConfig) -> int | None:
    """A Mamba mixer's parameters, from the keys each hybrid family writes; None when the config has none.

    Mamba2 (NemotronH, Bamba, Granite-4 hybrid, Falcon-H1): one in-projection to the gate, x, B, C (per group)
    and dt (per head), a causal conv over x, B and C, per-head dt bias, A and D, a gated norm and the out-
    projection. Mamba1 (Jamba; `mamba_dt_rank`): in-projection to x and z, a conv, x-to-(dt, B, C), dt
    projection, A (inner x state), D and the out-projection."""
    r, h = t.raw, t.hidden
    state = int_of(r, ("ssm_state_size", "mamba_d_state"))
    if state is None:
        return None
    conv = int_of(r, ("conv_kernel", "mamba_d_conv"), 4)
    expand = int_of(r, ("expand", "mamba_expand"), 2)
    conv_bias = flag_of(r, ("use_conv_bias", "mamba_conv_bias"), True)
    proj_bias = flag_of(r, ("mamba_proj_bias", "add_bias_linear"), False)
    dt_rank = int_of(r, ("mamba_dt_rank",))
    if dt_rank:  # Mamba1
        inner = expand * h
        n = h * 2 * inner + inner * conv + inner * (dt_rank + 2 * state) + dt_rank * inner + inner
        n += inner * state + inner + inner * h + (inner if conv_bias else 0) + ((2 * inner + h) if proj_bias else 0)
        return n + (dt_rank + 2 * state if t.model_type == "jamba" else 0)  # Jamba's dt, B and C norms
    heads = int_of(r, ("mamba_num_heads", "mamba_n_heads", "n_mamba_heads"))
    head_dim = int_of(r, ("mamba_head_dim", "mamba_d_head", "mamba_headdim"))
    groups = int_of(r, ("n_groups", "mamba_n_groups", "mamba_ngroups"), 1)
    inner = int_of(r, ("mamba_d_ssm",)) or (heads * head_dim if heads and head_dim else expand * h)
    heads = heads or (inner // head_dim if head_dim else 1)
    conv_dim = inner + 2 * groups * state
    projected = inner + conv_dim + heads
    n = h * projected + conv_dim * conv + 3 * heads + inner + inner * h
    return n + (conv_dim if conv_bias else 0) + ((projected + h) if proj_bias else 0)
