"""The bytes a quantized checkpoint stores per weight of its linear layers, from its quantization_config.

A linear layer of `n_in` inputs is stored as its packed values plus, per group of `g` inputs, a scale (and a
zero point when asymmetric), as each format's writer lays it out:

* GPTQ (AutoGPTQ / GPTQModel), AWQ and AutoRound: `bits`-bit values packed in int32, per group an fp16
  scale and a packed zero point; GPTQ also its g_idx, 4 bytes per input row (per weight 4 / the outputs,
  taken as the hidden size).
* compressed-tensors (llm-compressor): the widest config group's `num_bits` of an int or float type, with
  scales per group (`group_size`), per block, per output channel (one per row) or per tensor; 8-bit floats
  keep float32 scales, NVFP4 (4-bit floats in groups of 16) an FP8 scale a group, integers 16-bit scales.
* bitsandbytes: NF4/FP4 in 64-value blocks with a float32 absmax (8-bit, plus a float32 per 256 blocks,
  with `bnb_4bit_use_double_quant`), or LLM.int8 rows with a float32 scale.
* FP8 (`fp8`, INC, FBGEMM, Quark, ModelOpt FP8): one byte and a float32 scale per 128 x 128 block; ModelOpt
  NVFP4 as compressed-tensors' NVFP4.

Embeddings, the LM head and a vision tower stay 16-bit, as these recipes leave them (ModelShape splits the
parameters). None for no quantization, or a layout not known here (the weights are then counted at 16 bits).
"""

from __future__ import annotations

from dataclasses import dataclass

FP8_BLOCK = 128 * 128
PACKED_METHODS = frozenset({"gptq", "awq", "auto_round", "autoround", "gptq_marlin", "awq_marlin", "gptq_hpu",
                            "awq_hpu"})
FP8_METHODS = frozenset({"fp8", "fbgemm_fp8", "modelopt", "inc", "fp8_inc", "ptpc_fp8", "quark"})


@dataclass(frozen=True)
class LinearFormat:
    method: str  # the config's quant_method (fp8 for every one-byte float format)
    name: str  # the stored numbers: int4, int8, fp8, nvfp4, nf4
    bytes_per_weight: float  # values, scales and zero points together, per weight of a linear layer


def _group(value, n_in: int) -> int:
    g = int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 128
    return n_in if g <= 0 else g  # -1: one group a row (per channel)


def _compressed_tensors(q: dict, n_in: int) -> LinearFormat | None:
    groups = [g.get("weights") for g in (q.get("config_groups") or {}).values() if isinstance(g, dict)]
    groups = [w for w in groups if isinstance(w, dict) and w.get("num_bits")]
    if not groups:
        return None
    w = max(groups, key=lambda w: int(w["num_bits"]))  # the widest group bounds the memory
    bits, is_float = int(w["num_bits"]), str(w.get("type") or "int") == "float"
    scale = (4 if bits == 8 else 1) if is_float else 2
    zero = 0 if w.get("symmetric", True) else bits / 8
    strategy = str(w.get("strategy") or "tensor")
    if strategy == "group":
        per = (scale + zero) / _group(w.get("group_size"), n_in)
    elif strategy == "block":
        rows, cols = (w.get("block_structure") or [128, 128])[:2]
        per = scale / (int(rows) * int(cols))
    elif strategy == "channel":
        per = (scale + zero) / n_in
    else:
        per = 0.0
    if is_float and bits == 8:
        return LinearFormat("fp8", "fp8", 1 + per)
    return LinearFormat("compressed-tensors", "nvfp4" if is_float and bits == 4 else f"int{bits}", bits / 8 + per)


def linear_format(q: dict | None, n_in: int) -> LinearFormat | None:
    """The stored format of the linear layers a quantization_config describes (n_in: the hidden size, the
    inputs of a typical layer, for per-channel scales); None for none, or a layout not known here."""
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method") or "").lower().replace("-", "_")
    algo = str(q.get("quant_algo") or "").upper()
    if q.get("load_in_4bit") or q.get("load_in_8bit") or method == "bitsandbytes":
        if q.get("load_in_8bit"):
            return LinearFormat("bitsandbytes", "int8", 1 + 4 / n_in)
        absmax = 1 / 64 + 4 / (64 * 256) if q.get("bnb_4bit_use_double_quant") else 4 / 64
        return LinearFormat("bitsandbytes", str(q.get("bnb_4bit_quant_type") or "nf4"), 0.5 + absmax)
    if method in PACKED_METHODS:  # (quant_method with its '-' read as '_')
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        group = _group(q.get("group_size", q.get("q_group_size")), n_in)
        name = method.removesuffix("_marlin").removesuffix("_hpu")  # the kernel a server picks is not the format
        g_idx = 4 / n_in if name == "gptq" else 0.0
        return LinearFormat(name, f"int{bits}", bits / 8 + (2 + bits / 8) / group + g_idx)
    if method == "compressed_tensors":
        return _compressed_tensors(q, n_in)
    if "FP4" in algo:  # ModelOpt NVFP4 (quant_algo in the config or its hf_quant_config)
        return LinearFormat("modelopt", "nvfp4", 0.5 + 1 / 16)
    if method in FP8_METHODS or algo == "FP8" or (not method and algo.startswith("FP8")):
        return LinearFormat("fp8", "fp8", 1 + 4 / FP8_BLOCK)
    return None
