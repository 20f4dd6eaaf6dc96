"""The points of a search space a plan predicts: all of a discrete space, a quasi-random sample of the rest.

A space is discrete when every parameter takes finitely many values (choices, bools, integers, floats
with a step); a plan then predicts every point, up to `max_points` of them. A space with a continuous
parameter (a float without a step), or a discrete one with more points than that, is sampled: the
first `max_points` points of a scrambled Halton sequence (one prime per parameter, a random digit
permutation per prime, so low-discrepancy without the correlated diagonals of plain Halton in higher
dimensions) mapped onto each parameter's range; a parameter whose condition (`when:`) does not hold
is absent, as when Optuna samples it, and points that come out the same are kept once.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..space.schema import Parameter, SearchSpace

MAX_POINTS = 50_000
_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)


@dataclass(frozen=True)
class PointSet:
    values: list[dict[str, Any]]  # parameter values of each point, as Optuna would have suggested them
    discrete_size: int | None  # points of the space (None: a continuous parameter)
    sampled: bool  # a quasi-random sample rather than every point


def finite_values(p: Parameter) -> list | None:
    """Every value a parameter can take, or None for a continuous one."""
    if p.type in ("categorical", "bool"):
        return p.grid_values()
    if p.type == "int":
        step = int(p.step or 1)
        return list(range(int(p.low), int(p.high) + 1, step))
    if p.step:
        return p.grid_values()
    return None


def space_points(space: SearchSpace, max_points: int = MAX_POINTS, seed: int = 0) -> PointSet:
    """The points a plan predicts (see the module docstring)."""
    if max_points < 1:
        raise ValueError(f"max_points must be at least 1, got {max_points}")
    finite = {p.name: finite_values(p) for p in space.parameters}
    size = None if any(v is None for v in finite.values()) else _count(space, finite)
    if size is not None and size <= max_points:
        return PointSet(list(_every(space, finite)), size, False)
    return PointSet(_sample(space, finite, max_points, seed), size, True)


def _count(space: SearchSpace, finite: dict[str, list]) -> int:
    """Distinct points of a discrete space, conditions honoured (without listing them when there is no
    condition)."""
    if not any(p.when for p in space.parameters):
        return math.prod(len(v) for v in finite.values())
    return sum(1 for _ in _every(space, finite))


def _every(space: SearchSpace, finite: dict[str, list]) -> Iterator[dict[str, Any]]:
    """Every point, depth first in the space's parameter order (a parameter whose condition fails is absent)."""
    def walk(i: int, values: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if i == len(space.parameters):
            yield dict(values)
            return
        p = space.parameters[i]
        if not space.condition_met(p, values):
            yield from walk(i + 1, values)
            return
        for v in finite[p.name]:
            values[p.name] = v
            yield from walk(i + 1, values)
        del values[p.name]

    if not any(p.when for p in space.parameters):  # the common case, without recursion
        names = [p.name for p in space.parameters]
        for combo in itertools.product(*(finite[n] for n in names)):
            yield dict(zip(names, combo))
        return
    yield from walk(0, {})


def _sample(space: SearchSpace, finite: dict[str, list | None], n: int, seed: int) -> list[dict[str, Any]]:
    dims = len(space.parameters)
    if dims > len(_PRIMES):
        raise ValueError(f"{space.source}: {dims} parameters; a plan samples at most {len(_PRIMES)}")
    rng = random.Random(seed)
    perms = [[0] + rng.sample(range(1, b), b - 1) for b in _PRIMES[:dims]]  # digit scrambling, 0 kept
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    # Distinct points of a discrete space run out before the index does: stop after enough repeats.
    index, misses = 1, 0
    while len(out) < n and misses < 20 * n:
        u = [_radical_inverse(index, _PRIMES[d], perms[d]) for d in range(dims)]
        index += 1
        values: dict[str, Any] = {}
        for d, p in enumerate(space.parameters):
            if space.condition_met(p, values):
                values[p.name] = _value(p, finite[p.name], u[d])
        key = json.dumps(values, sort_keys=True, default=str)
        if key in seen:
            misses += 1
            continue
        seen.add(key)
        out.append(values)
    return out


def _radical_inverse(i: int, base: int, perm: list[int]) -> float:
    x, f = 0.0, 1.0 / base
    while i:
        i, digit = divmod(i, base)
        x += perm[digit] * f
        f /= base
    return x


def _value(p: Parameter, finite: list | None, u: float) -> Any:
    """The parameter's value at quantile u in [0, 1): its choices or grid evenly, a log scale as Optuna
    samples it, a continuous float anywhere in [low, high]."""
    if finite is not None and not (p.log and p.type == "int"):
        return finite[min(int(u * len(finite)), len(finite) - 1)]
    lo, hi = float(p.low), float(p.high)
    if p.type == "int":  # log scale over the integers: as Optuna, uniform in log(low - 0.5) .. log(high + 0.5)
        x = math.exp(math.log(lo - 0.5) + u * (math.log(hi + 0.5) - math.log(lo - 0.5))) if lo > 0.5 else \
            lo + u * (hi - lo + 1)
        step = int(p.step or 1)
        return int(min(hi, max(lo, lo + round((x - lo) / step) * step)))
    x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))) if p.log else lo + u * (hi - lo)
    return min(hi, max(lo, float(f"{x:.6g}")))  # the digits an env file carries (schema._env_text)
