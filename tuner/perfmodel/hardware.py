"""Gaudi devices the performance model knows, with the constants of docs/calibration.md; models come
from tuner/models (their own config.json).

Numbers come from docs/calibration.md sections 1 and 7.4; the ones marked GUESS there
stay guesses here. Everything is per card: tensor parallelism divides weights, KV heads and compute.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models import BF16, FP8, ModelShape, resolve

GiB = 1024**3
MiB = 1024**2


def model_for(name: str, hf_overrides: str | None = None) -> ModelShape:
    """The model `name` names, known from its config (tuner/models): a folder, a config.json, the HF
    cache or the catalogue, with the server's --hf-overrides over it. Unknown names are refused
    (UnknownModelError) with the closest ones."""
    return resolve(name, hf_overrides)


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


# --- devices the tables lack ------------------------------------------------------------------
# The tuner still predicts for them, from a generic prior the first boots calibrate (wide uncertainty
# until then: calibration.GENERIC_PRIOR_SD). The simulator keeps to the tables.


def device_for(name: str) -> Device:
    """The table's device, or for one the tables lack Gaudi 2's constants as a generic prior."""
    if name in DEVICES:
        return DEVICES[name]
    g = DEVICES["gaudi2"]
    return Device(name, g.visible_bytes, g.bandwidth, g.flops_bf16, g.flops_fp8, g.eta_m, g.eta_c, g.c_dec, g.c_pre,
                  generic=True)


def is_generic(device: str, model: str) -> bool:
    """True when the tables know the device only as a generic prior (a model is always known from its
    config; `model` is kept for the callers that pass it)."""
    return device_for(device).generic
