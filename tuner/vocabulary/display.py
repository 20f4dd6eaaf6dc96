"""Numbers in human units, the same in the terminal and in the HTML page."""

from __future__ import annotations

import math
from typing import Any


def missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def num(v: Any) -> str:
    """A plain number: thousands separators, few digits."""
    if missing(v):
        return "-"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int) or float(v).is_integer() and abs(v) >= 1:
        return f"{int(v):,}"
    return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"


def seconds(v: Any) -> str:
    """Durations: 41 s, 5 min 12 s, 2.5 h."""
    if missing(v):
        return "-"
    v = float(v)
    if abs(v) < 100:
        return f"{v:.0f} s" if abs(v) >= 10 else f"{v:.1f} s"
    if abs(v) < 3600:
        m, s = divmod(round(v), 60)
        return f"{m} min {s:02d} s"
    return f"{v / 3600:.1f} h"


def band(central: Any, low: Any = None, high: Any = None, fmt=None, source: str | None = None) -> str:
    """A prediction with its band and where it comes from: '49 s (35-70 s)', '49 s (35-70 s, a log)';
    the unit is said once when both ends share it; without a band, the figure alone."""
    fmt = fmt or seconds
    if missing(central):
        return "-"
    text = fmt(central)
    if missing(low) or missing(high):
        return f"{text} ({source})" if source else text
    return f"{text} ({span(low, high, fmt)}{', ' + source if source else ''})"


def span(low: Any, high: Any, fmt=None) -> str:
    """A range in one unit: '35-70 s'; durations in the unit of the high end ('0.6-9.4 min', '0.9-15 h')."""
    fmt = fmt or seconds
    if fmt is seconds and float(high) >= 100:
        unit, div = ("h", 3600.0) if float(high) >= 3600 else ("min", 60.0)
        lo_v, hi_v = float(low) / div, float(high) / div
        digits = 0 if lo_v >= 10 else 1
        return f"{lo_v:.{digits}f}-{hi_v:.{0 if hi_v >= 10 else 1}f} {unit}"
    lo, hi = fmt(low), fmt(high)
    unit = hi.split()[-1] if " " in hi else ""
    if unit and lo.endswith(" " + unit) and len(lo.split()) == 2 and len(hi.split()) == 2:
        lo = lo.split()[0]
    return f"{lo}-{hi}"


def millis(v: Any) -> str:
    if missing(v):
        return "-"
    return f"{v:,.0f} ms" if abs(v) >= 10 else f"{v:.2g} ms"


def metric(name: str, v: Any) -> str:
    """A value in the unit its name says: *_ms, *_s, *throughput (tokens or requests per second)."""
    if missing(v):
        return "-"
    if name.endswith("_ms"):
        return millis(v)
    if name.endswith("_s") or name == "warmup":
        return seconds(v)
    if name.endswith("output_throughput") or name.endswith("token_throughput"):
        return f"{v:,.0f} tok/s"
    if name == "request_throughput":
        return f"{v:.2f} req/s"
    if name.startswith("cost_per_mtok"):  # dollars per million output tokens (trial/cost.py money's digits)
        return f"${v:,.0f}" if abs(v) >= 1000 else f"${v:,.2f}" if abs(v) >= 0.1 else f"${v:,.4f}"
    return num(v)


def percent(v: Any, digits: int = 0) -> str:
    if missing(v):
        return "-"
    if not v:
        return "0%"
    if abs(v) < 1 and digits == 0:  # not "-0%" for a small loss
        digits = 1
    return f"{v:+.{digits}f}%" if round(v, digits) else "0%"


def change(new: Any, old: Any) -> tuple[Any, Any]:
    """(absolute difference, percent difference) of new against old; None where unknown."""
    if missing(new) or missing(old):
        return None, None
    diff = new - old
    return diff, (100.0 * diff / abs(old) if old else None)


SHORT = {"output_throughput": "tok/s", "warmup_s": "warmup", "first_output_throughput": "first-run tok/s",
         "cost_per_mtok": "$/Mtok"}


def short(name: str) -> str:
    """A short column header: 'p99_ttft_ms' -> 'p99 TTFT', 'output_throughput' -> 'tok/s'."""
    if name in SHORT:
        return SHORT[name]
    parts = name.split("_")
    if len(parts) == 3 and parts[2] == "ms":
        return f"{parts[0]} {parts[1].upper()}"
    if len(parts) == 4 and parts[0] in ("first", "warm") and parts[3] == "ms":  # the first-run window's
        return f"{parts[0]}-run {parts[1]} {parts[2].upper()}" if parts[0] == "first" else \
            f"warm {parts[1]} {parts[2].upper()}"
    return name.replace("_", " ")


def above(value: float, limit: float) -> str:
    """`value` with just enough digits to show it is over `limit`: 240.4 against 240 is '240.4', not '240'."""
    for digits in range(4):
        text = f"{value:,.{digits}f}"
        if float(text.replace(",", "")) > limit:
            return text
    return f"{value:,.4g}"
