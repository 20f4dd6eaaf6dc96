"""Which Gaudi a log ran on, from the device memory its memory-profiler lines report per card:
`(14.97 GiB/94.62 GiB used)` is a Gaudi 2, `/126.5 GiB used)` a Gaudi 3, about 30 GiB a Gaudi 1 (what PyTorch
sees of each card's HBM). Pure."""

from __future__ import annotations

import re

USED = re.compile(r"/(\d+(?:\.\d+)?) GiB used\)")
# (low, high) GiB per card as PyTorch sees it -> the device
RANGES = ((28.0, 34.0, "gaudi1"), (90.0, 100.0, "gaudi2"), (118.0, 135.0, "gaudi3"))


def device_of_memory(gib: float) -> str | None:
    """The Gaudi with this much device memory per card, None for another amount."""
    return next((name for lo, hi, name in RANGES if lo <= gib <= hi), None)


def card_memory(line: str) -> float | None:
    """The per-card device memory (GiB) a memory-profiler line reports, None when it reports none."""
    m = USED.search(line)
    return float(m.group(1)) if m else None
