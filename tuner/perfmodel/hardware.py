"""Model shapes and Gaudi devices the performance model knows, with the constants of docs/calibration.md.

Numbers come from docs/calibration.md sections 1 and 7.4; the ones marked GUESS there
stay guesses here. Everything is per card: tensor parallelism divides weights, KV heads and compute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GiB = 1024**3
MiB = 1024**2

BF16 = "bf16"
FP8 = "fp8"
DTYPE_BYTES = {BF16: 2, FP8: 1}


@dataclass(frozen=True)
class ModelShape:
    name: str
    params: int  # parameter count (weights bytes = params x bytes per weight)
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_position: int  # max_model_len when the user gives none
    graph_mem_mib: float  # HPU-graph memory per captured bucket, current plugin era (Intel autocalc)
    generic: bool = False  # not in the tables: estimated from the name, to be calibrated by the first boots

    def weight_bytes(self, dtype: str, tp: int = 1) -> int:
        return self.params * DTYPE_BYTES[dtype] // tp

    def kv_bytes_per_token(self, kv_dtype: str, tp: int = 1) -> int:
        # K and V, every layer; KV heads are split across tensor-parallel ranks (8 heads: TP <= 8).
        heads = max(1, self.kv_heads // tp)
        return 2 * self.layers * heads * self.head_dim * DTYPE_BYTES[kv_dtype]

    def largest_tensor_bytes(self, dtype: str, tp: int = 1) -> int:
        # The embedding table; what an out-of-memory weight load reports as the failed allocation.
        return self.vocab * self.hidden * DTYPE_BYTES[dtype] // tp


# Llama-3.1-8B: 16,060,522,496 B in BF16 ([VG] settings_vllm.csv). Llama-3.1-70B: 141,107,412,992 B.
MODELS: dict[str, ModelShape] = {
    "llama-3.1-8b": ModelShape("llama-3.1-8b", 8_030_261_248, 32, 4096, 32, 8, 128, 128_256, 131_072, 10.0),
    "llama-3.1-70b": ModelShape("llama-3.1-70b", 70_553_706_496, 80, 8192, 64, 8, 128, 128_256, 131_072, 20.0),
}


def model_for(name: str) -> ModelShape:
    """A shape by its simulator name, or guessed from a served model path ("...Llama-3.1-70B...")."""
    key = name.lower()
    if key in MODELS:
        return MODELS[key]
    if "70b" in key:
        return MODELS["llama-3.1-70b"]
    if "8b" in key:
        return MODELS["llama-3.1-8b"]
    raise ValueError(f"unknown simulated model {name!r}; known: {', '.join(MODELS)}")


@dataclass(frozen=True)
class Device:
    name: str
    visible_bytes: float  # HBM visible to PyTorch
    bandwidth: float  # B/s
    flops_bf16: float
    flops_fp8: float
    eta_m: float  # achieved fraction of HBM bandwidth in decode
    eta_c: float  # achieved fraction of peak matrix FLOPS in prefill
    c_dec: float  # fixed seconds per decode step (launch, sampler, host)
    c_pre: float  # fixed seconds per prefill step
    generic: bool = False  # not in the tables: a stand-in, to be calibrated by the first boots

    def flops(self, dtype: str) -> float:
        return self.flops_fp8 if dtype == FP8 else self.flops_bf16


DEVICES: dict[str, Device] = {
    # G2: eta_m GUESS, eta_c partly GUESS, c_dec GUESS, c_pre from the 128-token latency.
    "gaudi2": Device("gaudi2", 94.62 * GiB, 2.45e12, 432e12, 865e12, 0.75, 0.6, 3e-3, 3.5e-3),
    # G3: eta_m and c_dec fitted to 15.4-16.7 ms decode at bs 64; eta_c low confidence; c_pre GUESS.
    "gaudi3": Device("gaudi3", 126.5 * GiB, 3.7e12, 1835e12, 1835e12, 0.8, 0.3, 2e-3, 3.5e-3),
}


def normalize_dtype(dtype: str | None, quantization: str | None = None) -> str:
    """`--dtype` / `--quantization` as vLLM takes them -> bf16 or fp8 (the weight format)."""
    if quantization and quantization.lower() in ("fp8", "inc", "fp8_inc"):
        return FP8
    d = (dtype or "auto").lower()
    if d in ("fp8", "float8", "fp8_e4m3"):
        return FP8
    if d in ("auto", "bf16", "bfloat16", "float16", "half", "fp16"):
        return BF16  # Gaudi serves float16 checkpoints in the same 2-byte layout
    raise ValueError(f"unsupported --dtype {dtype!r}")


def normalize_kv_dtype(kv_cache_dtype: str | None, dtype: str) -> str:
    k = (kv_cache_dtype or "auto").lower()
    if k == "auto":
        return BF16  # vLLM keeps the KV cache in the activation dtype unless told otherwise
    if k.startswith("fp8"):
        return FP8
    if k in ("bf16", "bfloat16"):
        return BF16
    raise ValueError(f"unsupported --kv-cache-dtype {kv_cache_dtype!r}")


# --- shapes and devices the tables lack --------------------------------------------------------
# The tuner still predicts for them, from a generic prior the first boots calibrate (wide uncertainty
# until then: calibration.GENERIC_PRIOR_SD). The simulator keeps to the tables.

GENERIC_PARAMS = 8e9  # a name without a size ("my-org/custom") is taken for an 8B model


def generic_shape(name: str) -> ModelShape:
    """A Llama-like shape for a model the tables lack, sized by the parameter count in its name ("13b"):
    hidden and layers scaled as between Llama-3.1-8B and 70B, 8 KV heads of 128."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*b(?![a-z])", name.lower())
    params = float(m.group(1)) * 1e9 if m else GENERIC_PARAMS
    r = params / 8e9
    hidden = max(1024, 1024 * round(4096 * r**0.32 / 1024))  # heads a multiple of 8, like the known shapes
    layers = max(8, round(32 * r**0.42))
    return ModelShape(name, int(params), layers, hidden, hidden // 128, 8, 128, 128_256, 131_072,
                      10.0 * r**0.32, generic=True)


def shape_for(name: str) -> ModelShape:
    """The table's shape (model_for), or a generic one for a model the tables lack."""
    try:
        return model_for(name)
    except ValueError:
        return generic_shape(name)


def device_for(name: str) -> Device:
    """The table's device, or for one the tables lack Gaudi 2's constants as a generic prior."""
    if name in DEVICES:
        return DEVICES[name]
    g = DEVICES["gaudi2"]
    return Device(name, g.visible_bytes, g.bandwidth, g.flops_bf16, g.flops_fp8, g.eta_m, g.eta_c, g.c_dec, g.c_pre,
                  generic=True)


def is_generic(device: str, model: str) -> bool:
    """True when the tables know the device or the model only as a generic prior."""
    return shape_for(model).generic or device_for(device).generic
