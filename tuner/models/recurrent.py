"""The fixed-size recurrent state a hybrid model keeps per sequence in each of its recurrent layers (Gated
DeltaNet, KDA, Mamba1/2, short convolution, linear attention), sized from its config.json as vLLM 0.32 sizes it.

The rules follow vLLM 0.32: model_executor/layers/mamba/mamba_utils.py (MambaStateShapeCalculator and
MambaStateDtypeCalculator), each model class's get_mamba_state_shape_from_config /
get_mamba_state_dtype_from_config (models/qwen3_next.py, qwen3_5.py, olmo_hybrid.py, nemotron_h.py,
granitemoehybrid.py, falcon_h1.py, zamba2.py, jamba.py, lfm2.py, lfm2_moe.py, bailing_moe_linear.py,
bailing_moe_v3.py, vllm/models/kimi_k3/nvidia/model.py), the layers' own get_state_shape (layers/mamba/*.py),
the config-driven SSM dtypes of model_executor/models/config.py (Qwen3.5's mamba_ssm_dtype, NemotronH's
mamba_ssm_cache_dtype) and MambaSpec.page_size_bytes (v1/kv_cache_interface.py: the sum over the state tensors
of their element count times their dtype's size; nothing else, unless a padded page size is set by the
hybrid block-size alignment). The conv state is laid out (state_len, dim), vLLM's default "SD" layout; the
"DS" layout (VLLM_SSM_CONV_STATE_LAYOUT) transposes it and has the same bytes. ReplaySSM / KDA RecoverSSM
(--use-replayssm, off by default) add ring buffers that are not modelled here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .hfconfig import TextConfig

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# vLLM's STR_DTYPE_TO_TORCH_DTYPE spellings of the same three
DTYPE_ALIASES = {"float": "float32", "half": "float16", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

# Architectures whose text config's mamba_ssm_dtype becomes --mamba-ssm-cache-dtype when that is "auto"
# (config.py Qwen3_5ForConditionalGenerationConfig, mapped to these four in MODELS_CONFIG_MAP).
QWEN3_5_ARCHITECTURES = frozenset({"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration",
                                   "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"})
# config.py NemotronHForCausalLMConfig / NemotronHNanoVLV2Config: "auto" becomes the config's
# mamba_ssm_cache_dtype, float32 when it has none.
NEMOTRON_H_ARCHITECTURES = frozenset({"NemotronHForCausalLM", "NemotronHPuzzleForCausalLM", "NemotronH_Nano_VL_V2"})
GDN_ARCHITECTURES = QWEN3_5_ARCHITECTURES | {"Qwen3NextForCausalLM", "OlmoHybridForCausalLM"}
GDN_MODEL_TYPES = frozenset({"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "olmo_hybrid"})


def _dtype(name: str) -> str:
    name = str(name).removeprefix("torch.")
    name = DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise ValueError(f"unsupported recurrent-state dtype {name!r} (float32, float16 or bfloat16)")
    return name


class IndivisibleState(ValueError):
    """A state dimension the tensor-parallel ranks cannot split (vLLM's divide() asserts as the model builds)."""

    def __init__(self, what: str, n: int, tp: int):
        super().__init__(f"{what} ({n}) is not divisible by the tensor-parallel size {tp}")
        self.n, self.tp = n, tp


def _divide(n: int, tp: int, what: str) -> int:
    # vLLM's divide(): the sharded dimension must split evenly across the ranks
    if n % tp:
        raise IndivisibleState(what, n, tp)
    return n // tp


@dataclass(frozen=True)
class RecurrentSpec:
    """One recurrent layer's state layout, TP-independent; `layers` layers keep it.

    kind: vLLM's mamba_type spelling ("gdn_attention", "mamba2", "mamba1", "short_conv", "linear_attention");
    "kda" for Kimi Delta Attention (in vLLM 0.32 a GDN_ATTN backend layer with its own state rule).
    conv_dim: channels of the conv state before TP (Mamba2: without the group padding TP may add);
    conv_kernel: the conv's kernel width (the state keeps kernel - 1 positions, plus one per speculative token);
    heads, head_dim, state_dim: the temporal state is (heads / tp, head_dim, state_dim) (Mamba1: (conv_dim / tp,
    state_dim); linear attention: (heads / tp, head_dim, head_dim)); n_groups: Mamba2's B/C groups.
    config_ssm_dtype: what the config makes --mamba-ssm-cache-dtype "auto" mean (Qwen3.5, NemotronH), else None.
    fixed_ssm_dtype: the model class ignores --mamba-ssm-cache-dtype (BailingMoeV3's KDA: always "auto").
    """

    kind: str
    layers: int
    conv_dim: int = 0
    conv_kernel: int = 0
    heads: int = 0
    head_dim: int = 0
    state_dim: int = 0
    n_groups: int = 0
    config_ssm_dtype: str | None = None
    fixed_ssm_dtype: bool = False

    def _conv_len(self, num_spec: int) -> int:
        # Mamba1 keeps no room for speculative tokens (mamba1_state_shape takes no num_spec)
        return self.conv_kernel - 1 + (0 if self.kind == "mamba1" else num_spec)

    def shapes(self, tp: int = 1, num_spec: int = 0) -> tuple[tuple[int, ...], ...]:
        """The state tensors of one layer for one sequence on one rank (vLLM's get_state_shape)."""
        if tp < 1 or num_spec < 0:
            raise ValueError(f"tp must be >= 1 and num_spec >= 0 (got {tp}, {num_spec})")
        conv_len = self._conv_len(num_spec)
        if self.kind in ("gdn_attention", "kda"):
            return ((conv_len, _divide(self.conv_dim, tp, "conv channels")),
                    (_divide(self.heads, tp, "value heads"), self.head_dim, self.state_dim))
        if self.kind == "mamba2":
            # groups that do not split across the ranks are replicated so each rank has its heads' groups
            groups = self.n_groups + (0 if self.n_groups % tp == 0 else tp - self.n_groups)
            conv = self.conv_dim + 2 * groups * self.state_dim
            return ((conv_len, _divide(conv, tp, "conv channels")),
                    (_divide(self.heads, tp, "SSM heads"), self.head_dim, self.state_dim))
        if self.kind == "mamba1":
            inner = _divide(self.conv_dim, tp, "intermediate size")
            return ((conv_len, inner), (inner, self.state_dim))
        if self.kind == "short_conv":
            return ((conv_len, _divide(self.conv_dim, tp, "conv channels")),)
        if self.kind == "linear_attention":
            # the layer asserts num_heads % tp == 0 (layers/mamba/linear/base.py)
            return ((_divide(self.heads, tp, "attention heads"), self.head_dim, self.head_dim),)
        raise ValueError(f"unknown recurrent kind {self.kind!r}")

    def dtypes(self, model_dtype: str = "bfloat16", mamba_cache_dtype: str = "auto",
               mamba_ssm_cache_dtype: str = "auto") -> tuple[str, ...]:
        """The dtype of each tensor of shapes(), as MambaStateDtypeCalculator picks them."""
        conv = _dtype(model_dtype if mamba_cache_dtype == "auto" else mamba_cache_dtype)
        if self.kind in ("short_conv", "linear_attention"):
            return (conv,)
        ssm = "auto" if self.fixed_ssm_dtype else mamba_ssm_cache_dtype
        if ssm == "auto" and self.config_ssm_dtype:
            ssm = self.config_ssm_dtype
        if self.kind == "kda":
            # KDA's recurrent state is float32 unless asked otherwise, and only float32 or bfloat16
            ssm = "float32" if ssm == "auto" else _dtype(ssm)
            if ssm not in ("float32", "bfloat16"):
                raise ValueError(f"KDA recurrent state supports only auto, float32 and bfloat16; got {ssm}")
            return (conv, ssm)
        return (conv, conv if ssm == "auto" else _dtype(ssm))

    def page_bytes(self, tp: int = 1, model_dtype: str = "bfloat16", mamba_cache_dtype: str = "auto",
                   mamba_ssm_cache_dtype: str = "auto", num_spec: int = 0) -> int:
        """One layer's state for one sequence on one rank: vLLM's MambaSpec.page_size_bytes, unpadded."""
        shapes = self.shapes(tp, num_spec)
        dtypes = self.dtypes(model_dtype, mamba_cache_dtype, mamba_ssm_cache_dtype)
        return sum(math.prod(s) * DTYPE_BYTES[d] for s, d in zip(shapes, dtypes, strict=True))


def _int(raw: dict, key: str, default: int | None = None) -> int:
    value = raw.get(key)
    if value is None:
        if default is None:
            raise KeyError(key)
        return default
    return int(value)


def _kinds_count(t: TextConfig) -> int:
    return sum(k in ("linear", "mamba") for k in t.layer_kinds)


def recurrent_spec(t: TextConfig) -> RecurrentSpec | None:
    """The recurrent state of a hybrid model's text config, None for a model without recurrent layers.

    The layer count is the config's linear / Mamba layers (t.layer_kinds), except where vLLM builds a recurrent
    mixer in layers hfconfig marks as attention: Falcon-H1 (attention and Mamba2 side by side in every layer) and
    Zamba2 (its "hybrid" layers keep their Mamba2 mixer).
    Missing fields take transformers' class defaults, as the config object vLLM reads has them.
    """
    raw, arch, mt = t.raw, t.architecture, t.model_type
    counted = _kinds_count(t)
    spec: RecurrentSpec | None = None
    if arch in GDN_ARCHITECTURES or mt in GDN_MODEL_TYPES:
        # Qwen3NextConfig's defaults (OlmoHybrid configs write theirs out)
        k_heads, v_heads = _int(raw, "linear_num_key_heads", 16), _int(raw, "linear_num_value_heads", 32)
        k_dim, v_dim = _int(raw, "linear_key_head_dim", 128), _int(raw, "linear_value_head_dim", 128)
        ssm = raw.get("mamba_ssm_dtype") if arch in QWEN3_5_ARCHITECTURES else None
        spec = RecurrentSpec("gdn_attention", counted, conv_dim=2 * k_heads * k_dim + v_heads * v_dim,
                             conv_kernel=_int(raw, "linear_conv_kernel_dim", 4), heads=v_heads, head_dim=v_dim,
                             state_dim=k_dim, config_ssm_dtype=str(ssm) if ssm else None)
    elif isinstance(raw.get("linear_attn_config"), dict):  # Kimi-Linear, Kimi-K3's text part
        kda = raw["linear_attn_config"]
        heads, dim = int(kda["num_heads"]), int(kda["head_dim"])
        spec = RecurrentSpec("kda", counted, conv_dim=3 * heads * dim,
                             conv_kernel=int(kda.get("short_conv_kernel_size") or 4),
                             heads=heads, head_dim=dim, state_dim=dim)
    elif arch == "BailingMoeV3ForCausalLM":  # KDA sized from the top-level fields; the SSM dtype is not read
        heads, dim = int(raw["num_attention_heads"]), int(raw["head_dim"])
        spec = RecurrentSpec("kda", counted, conv_dim=3 * heads * dim, conv_kernel=_int(raw, "short_conv_kernel_size"),
                             heads=heads, head_dim=dim, state_dim=dim, fixed_ssm_dtype=True)
    elif arch in NEMOTRON_H_ARCHITECTURES or mt == "nemotron_h":
        heads, dim = _int(raw, "mamba_num_heads", 128), _int(raw, "mamba_head_dim", 64)
        ssm = raw.get("mamba_ssm_cache_dtype") or "float32"
        spec = RecurrentSpec("mamba2", counted, conv_dim=heads * dim, conv_kernel=_int(raw, "conv_kernel", 4),
                             heads=heads, head_dim=dim, state_dim=_int(raw, "ssm_state_size", 128),
                             n_groups=_int(raw, "n_groups", 8),
                             config_ssm_dtype=str(ssm) if arch in NEMOTRON_H_ARCHITECTURES else None)
    elif mt in ("granitemoehybrid", "bamba"):  # GraniteMoeHybridConfig / BambaConfig defaults
        spec = RecurrentSpec("mamba2", counted, conv_dim=_int(raw, "mamba_expand", 2) * t.hidden,
                             conv_kernel=_int(raw, "mamba_d_conv", 4), heads=_int(raw, "mamba_n_heads", 128),
                             head_dim=_int(raw, "mamba_d_head", 64), state_dim=_int(raw, "mamba_d_state", 256),
                             n_groups=_int(raw, "mamba_n_groups", 1))
    elif mt == "falcon_h1":
        # mamba_d_ssm: written null means expand x hidden; left out, FalconH1Config's default 1024
        inner = (int(raw.get("mamba_expand", 2) * t.hidden) if "mamba_d_ssm" in raw and raw["mamba_d_ssm"] is None
                 else _int(raw, "mamba_d_ssm", 1024))
        spec = RecurrentSpec("mamba2", t.layers, conv_dim=inner, conv_kernel=_int(raw, "mamba_d_conv", 4),
                             heads=_int(raw, "mamba_n_heads", 128), head_dim=_int(raw, "mamba_d_head", 8),
                             state_dim=_int(raw, "mamba_d_state", 256), n_groups=_int(raw, "mamba_n_groups", 1))
    elif mt == "zamba2":
        inner = _int(raw, "mamba_expand", 2) * t.hidden
        head_dim = _int(raw, "mamba_headdim", 640)
        spec = RecurrentSpec("mamba2", t.layers, conv_dim=inner, conv_kernel=_int(raw, "mamba_d_conv", 4),
                             heads=_int(raw, "n_mamba_heads", inner // head_dim), head_dim=head_dim,
                             state_dim=_int(raw, "mamba_d_state", 64), n_groups=_int(raw, "mamba_ngroups", 1))
    elif mt == "jamba":
        spec = RecurrentSpec("mamba1", counted, conv_dim=_int(raw, "mamba_expand", 2) * t.hidden,
                             conv_kernel=_int(raw, "mamba_d_conv", 4), state_dim=_int(raw, "mamba_d_state", 16))
    elif mt in ("lfm2", "lfm2_moe"):
        # LFM2's layers convolve conv_dim channels, LFM2-MoE's hidden_size
        dim = t.hidden if mt == "lfm2_moe" else _int(raw, "conv_dim", t.hidden)
        spec = RecurrentSpec("short_conv", counted, conv_dim=dim, conv_kernel=_int(raw, "conv_L_cache", 3))
    elif arch == "BailingMoeV2_5ForCausalLM":  # its linear layers: hfconfig's layer_group_size rule
        head_dim = _int(raw, "head_dim", t.hidden // t.heads)
        spec = RecurrentSpec("linear_attention", counted, heads=t.heads, head_dim=head_dim)
    elif arch in ("MiniMaxText01ForCausalLM", "MiniMaxM1ForCausalLM"):
        # not in vLLM 0.32's registry; earlier vLLM sized it as linear attention over all attention heads
        head_dim = _int(raw, "head_dim", t.hidden // t.heads)
        spec = RecurrentSpec("linear_attention", counted, heads=t.heads, head_dim=head_dim)
    if spec is None or spec.layers <= 0:
        return None
    return spec
