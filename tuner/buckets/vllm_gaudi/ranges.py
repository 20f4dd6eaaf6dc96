"""The 1-D range makers of the linear and exponential strategies (padding-aware: padding_aware.py)."""

from __future__ import annotations

import math

from ..base import BucketConfigError


def _linear_range(bmin: int, bstep: int, bmax: int, label: str, zero_rule: bool) -> list[int]:
    """`warmup_range`: ramp-up doubling from min below step, then multiples of step, values >= min.

    From v0.15.1 (`zero_rule`) a min of 0 means "start at step and add a 0 bucket at the end".
    """
    if bmin > bmax:
        raise BucketConfigError(
            f"{label}_MIN={bmin} is greater than {label}_MAX={bmax}: AssertionError: Min. batch size cannot be "
            "greater than max. batch size. If you want to skip warmup, set VLLM_SKIP_WARMUP=true",
            f"{label}_MIN",
        )
    add_zero = zero_rule and bmin == 0
    if add_zero:
        if bmax == 0:
            return [0]
        bmin = bstep
    if bmin <= 0 and bmin < bstep:
        # Doubling 0 (or a negative value) never reaches the step: upstream loops forever.
        raise BucketConfigError(f"{label}_MIN={bmin}: the release's range generator never terminates "
                                "(doubling a value <= 0 never reaches the step)", f"{label}_MIN")
    if bstep == 0:
        raise BucketConfigError(f"{label}_STEP=0: ValueError: range() arg 3 must not be zero", f"{label}_STEP")
    values = []
    v = bmin
    while v < bstep and v <= bmax:
        values.append(v)
        v *= 2
    values.extend(range(bstep, bmax + 1, bstep))
    values = [v for v in values if v >= bmin]
    if add_zero:
        values.append(0)
    return values


def _fpow(base: float, exponent: float) -> float:
    """np.float_power on scalars: C pow(); NaN (not complex) for a negative base."""
    if base < 0:
        return math.nan
    return base ** exponent


def _ceil_step(x: float, step: int, label: str) -> int:
    if math.isnan(x):
        raise BucketConfigError(f"{label}: ValueError: cannot convert float NaN to integer", label)
    return math.ceil(x / step) * step


def _exponential_range(bmin: int, bstep: int, bmax: int, limit: int, contiguous_pa: bool, label: str) -> list[int]:
    """v0.15.1+ `warmup_range_with_limit`: `limit` points on the curve min*(max/min)^(i/(limit-1)),
    rounded up to the step; duplicates collapse; a min of 0/1 starts the curve at step and is added
    back; with contiguous PA the last point is max itself; the top value is clamped to max."""
    origin = None
    if bmin in (0, 1):
        origin, bmin = bmin, bstep
    if limit <= 0:
        raise BucketConfigError(f"{label}: AssertionError: num_buckets must be a positive integer", label)
    if limit == 1:
        return [bmax]
    values = set()
    ratio = bmax / bmin
    for i in range(limit):
        if i == limit - 1 and contiguous_pa:
            values.add(bmax)
        else:
            values.add(_ceil_step(bmin * _fpow(ratio, (1.0 / float(limit - 1)) * i), bstep, label))
    if origin is not None:
        values.add(origin)
    out = sorted(values)
    if out[-1] > bmax:
        out[-1] = bmax
    return out


def _exponential_range_fill(bmin: int, bstep: int, bmax: int, limit: int, contiguous_pa: bool, label: str,
                            long_context: bool = False) -> list[int]:
    """v0.10.1 `warmup_range_with_limit` (fill=True): a rounded point that is already taken is replaced
    by the closest unused multiple of step counted from min (ties resolved as Python's `min` over the
    set, which our int sets reproduce); stops early when none is left. `long_context` spends half the
    points on an exponential curve up to max/limit and the rest on a linear ramp to max (no fill)."""
    linear = set(range(bmin, bmax + 1, bstep))
    if limit <= 0:
        raise BucketConfigError(f"{label}: AssertionError: num_buckets must be a positive integer", label)
    if limit == 1:
        return [bmax]
    if long_context:
        n_exp = limit // 2
        n_lin = limit - n_exp
        first_step = bmax / limit
    else:
        n_exp, n_lin, first_step = limit, 0, bmax
    if n_exp == 1:
        raise BucketConfigError(f"{label}: ZeroDivisionError: float division by zero (limit {limit})", label)
    values: set[int] = set()
    for i in range(n_exp):
        point = bmin * _fpow(first_step / bmin, (1.0 / float(n_exp - 1)) * i)
        value = bmax if (i == limit - 1 and contiguous_pa) else _ceil_step(point, bstep, label)
        if value in values:
            free = linear.difference(values)
            if not free:
                break
            values.add(min(free, key=lambda x: abs(x - point)))
        else:
            values.add(value)
    if long_context:
        lin_step = (bmax - first_step) / n_lin
        for i in range(1, n_lin + 1):
            point = first_step + i * lin_step
            values.add(bmax if (i == limit and contiguous_pa) else _ceil_step(point, bstep, label))
    return sorted(values)


def _log2_limit(value: int, label: str) -> int:
    """math.ceil(math.log2(value)), failing the way upstream does on values <= 0."""
    if value <= 0:
        raise BucketConfigError(f"ValueError: math domain error: log2({value}) for the number of {label} buckets",
                                label)
    return math.ceil(math.log2(value))
