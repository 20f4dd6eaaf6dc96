"""The two weight / KV formats the performance model tells apart, and their bytes per element."""

from __future__ import annotations

BF16 = "bf16"
FP8 = "fp8"
DTYPE_BYTES = {BF16: 2, FP8: 1}
