"""How a simulated pooling model sends its vectors, as vLLM 0.32 does (entrypoints/pooling/utils.py,
utils/serial_utils.py): ``encoding_format`` float (JSON numbers), base64 (a string per vector of its bytes),
bytes (the bytes of every vector one after another in the body, what is where in a ``metadata`` header) or
bytes_only (the body alone); ``embed_dtype`` float32 (default), float16, bfloat16 (its bits sent as float16
words), fp8_e4m3 or fp8_e5m2 (a byte each); ``endianness`` native (default), little or big.

The OpenAI Python client asks for base64 unless told otherwise, so this is what most embedding clients get."""

from __future__ import annotations

import base64
import sys

import numpy as np

ENCODINGS = ("float", "base64", "bytes", "bytes_only")
EMBED_DTYPES = ("float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2")
ENDIANNESS = ("native", "big", "little")


def check(body: dict) -> str | None:
    """vLLM's refusal (its request model's validation) of an encoding it does not know, else None."""
    for name, allowed, default in (("encoding_format", ENCODINGS, "float"), ("embed_dtype", EMBED_DTYPES, "float32"),
                                   ("endianness", ENDIANNESS, "native")):
        value = body.get(name, default)
        if value not in allowed:
            return f"{name}: Input should be " + ", ".join(repr(a) for a in allowed[:-1]) + f" or {allowed[-1]!r} " \
                   f"(got {value!r})"
    return None


def _fp8(x: np.ndarray, exp_bits: int, man_bits: int) -> np.ndarray:
    """Round float32 values to an 8-bit float (sign, exponent, mantissa) and give its bytes, as torch casts them:
    past the largest finite value, e4m3fn saturates and e5m2 becomes infinite."""
    bias = 2 ** (exp_bits - 1) - 1
    sign = (x < 0).astype(np.uint8) << 7
    a = np.abs(x).astype(np.float64)
    out = np.zeros(a.shape, dtype=np.uint8)
    nz = a > 0
    e = np.floor(np.log2(a, where=nz, out=np.zeros_like(a)))
    e = np.clip(e, 1 - bias, None)  # below the normal range: subnormals at the smallest exponent
    m = np.round(a / 2.0 ** e * 2 ** man_bits)  # 1.mmm scaled (or 0.mmm for subnormals)
    carry = m >= 2 ** (man_bits + 1)
    e, m = np.where(carry, e + 1, e), np.where(carry, m / 2, m)
    normal = m >= 2 ** man_bits
    field = np.where(normal, e + bias, 0)
    top = 2 ** exp_bits - 1 - (exp_bits == 5)  # e5m2 keeps its top exponent for inf/nan; e4m3fn does not
    mant = np.where(normal, m - 2 ** man_bits, m)
    over = (field > top) | ((exp_bits == 4) & (field == top) & (mant > 2 ** man_bits - 2))  # e4m3fn: 0x7F is NaN
    if exp_bits == 5:  # e5m2: infinity (exponent all ones, mantissa 0)
        field, mant = np.where(over, top + 1, field), np.where(over, 0, mant)
    else:  # e4m3fn: the largest finite value (all ones but the mantissa's last bit: 0x7F is NaN)
        field, mant = np.where(over, top, field), np.where(over, 2 ** man_bits - 2, mant)
    out[nz] = ((field.astype(np.uint8) << man_bits) | mant.astype(np.uint8))[nz]
    return out | sign


def vector_bytes(values: list[float], embed_dtype: str = "float32", endianness: str = "native") -> bytes:
    """A vector's bytes as vLLM's tensor2binary gives them."""
    x = np.asarray(values, dtype=np.float32)
    if embed_dtype == "float16":
        with np.errstate(over="ignore"):  # past 65504: infinity, as torch casts
            arr = x.astype(np.float16)
    elif embed_dtype == "bfloat16":  # the top half of each float32, rounded to nearest even
        bits = x.view(np.uint32).astype(np.uint64)
        arr = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    elif embed_dtype == "fp8_e4m3":
        arr = _fp8(x, 4, 3)
    elif embed_dtype == "fp8_e5m2":
        arr = _fp8(x, 5, 2)
    else:
        arr = x
    if endianness != "native" and endianness != sys.byteorder:
        arr = arr.byteswap()
    return arr.tobytes()


def vector_base64(values: list[float], embed_dtype: str = "float32", endianness: str = "native") -> str:
    return base64.b64encode(vector_bytes(values, embed_dtype, endianness)).decode("ascii")
