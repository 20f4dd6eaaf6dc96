"""Small value readers the rules share: numbers, int tuples, bucket lists, tqdm clocks."""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

_NP_SCALAR = re.compile(r"np\.\w+\((-?\d+)\)")            # vllm-gaudi 0.10: np.int64(384)
_INT_TUPLE = re.compile(r"\(\s*(-?\d+(?:\s*,\s*-?\d+)*)\s*,?\s*\)")
_INTS = re.compile(r"-?\d+")


def _num(text: str) -> int | float | str:
    text = text.strip()
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _tuple_of_ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in _INTS.findall(_NP_SCALAR.sub(r"\1", text)))


def _bucket_list(text: str) -> tuple[tuple[tuple[int, ...], ...], bool]:
    """Python repr of a list of int tuples -> (tuples, complete). Cut-off text keeps whole tuples."""
    clean = _NP_SCALAR.sub(r"\1", text).strip()
    tuples = tuple(_tuple_of_ints(m.group(1)) for m in _INT_TUPLE.finditer(clean))
    complete = clean.startswith("[") and clean.endswith("]") and "..." not in clean
    return tuples, complete


def _clock_s(text: str | None) -> float | None:
    """tqdm '01:06' / '1:02:03' -> seconds; '?' -> None."""
    if not text or "?" in text:
        return None
    secs = 0.0
    for part in text.split(":"):
        secs = secs * 60 + float(part)
    return secs


def _rate_s(value: str | None, unit: str | None) -> float | None:
    """tqdm rate -> seconds per step: '3.64' 's/item' -> 3.64, '1.80' 'item/s' -> 0.556; '?' -> None."""
    if not value or not unit or "?" in value:
        return None
    rate = float(value)
    if unit.startswith("s/"):
        return rate
    return 1.0 / rate if rate > 0 else None
