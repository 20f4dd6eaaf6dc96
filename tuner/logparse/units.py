"""Byte amounts: `parse_bytes` ("7.923 GiB" -> int) and the `_B` pattern the rules embed."""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------------------------
# Byte amounts
# ---------------------------------------------------------------------------------------------

# vllm-hpu-extension / vllm-gaudi `format_bytes`: f'{size:.4g} {Ki|Mi|Gi|Ti}B' ("0 B", "-252 KiB",
# "161.9 MiB"). "GB"/"MB" also appear and are binary there too: vllm-gaudi logs
# "Loading model weights took %.4f GB" of bytes / 2**30, and the Habana allocator writes
# "Allocation failed for size::939524096 (896)MB".
_BYTE_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_BYTES_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*([KMGTP]?)(i?)B\s*$")
_B = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)? ?[KMGTP]?i?B"  # one amount inside a larger pattern


def parse_bytes(text: str) -> int:
    """'7.923 GiB' -> 8507343880. Units B, KiB, MiB, GiB, TiB (and KB/MB/GB/TB, read as binary)."""
    m = _BYTES_RE.match(text)
    if not m:
        raise ValueError(f"not a byte amount: {text!r}")
    return round(float(m.group(1)) * 1024 ** _BYTE_POWERS[m.group(2)])


def _bytes_or_none(text: str | None) -> int | None:
    return parse_bytes(text) if text else None
