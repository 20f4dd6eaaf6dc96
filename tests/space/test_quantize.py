"""The fitted bucket sets are provably minimal: the dynamic programme against brute force."""

from __future__ import annotations

import itertools
import random

import pytest

from tuner.space.fit.quantize import FitError, expected_waste, optimal_boundaries, pareto_curve


def brute_force(values, weights, k, granularity=1):
    rounded = [-(-v // granularity) * granularity for v in values]
    support = sorted(set(rounded))
    top = support[-1]
    best = None
    for rest in itertools.combinations(support[:-1], min(k, len(support)) - 1):
        cand = tuple(sorted(rest)) + (top,)
        waste = expected_waste(values, cand, weights)
        if best is None or waste < best[0] - 1e-12:
            best = (waste, cand)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_dynamic_programme_equals_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 14)
    values = [rng.choice([rng.randrange(1, 60), rng.randrange(1, 4000)]) for _ in range(n)]
    weights = [rng.random() + 0.01 for _ in range(n)] if seed % 2 else None
    granularity = rng.choice([1, 1, 16, 128])
    for k in range(1, 6):
        fit = optimal_boundaries(values, k, weights, granularity=granularity)
        waste, _ = brute_force(values, weights, k, granularity)
        assert fit.waste == pytest.approx(waste, abs=1e-9)
        assert fit.waste == pytest.approx(expected_waste(values, fit.boundaries, weights), abs=1e-9)
        assert fit.boundaries[-1] >= max(values)


def test_curve_is_monotone_and_stops_at_the_distinct_values():
    values = [100, 100, 200, 900, 901, 5000]
    curve = pareto_curve(values, max_buckets=10)
    assert [f.count for f in curve] == [1, 2, 3, 4, 5]
    assert all(a.waste >= b.waste for a, b in zip(curve, curve[1:]))
    assert curve[-1].waste == 0 and curve[-1].boundaries == (100, 200, 900, 901, 5000)


def test_long_tail_gets_its_buckets_where_the_mass_is():
    # chat traffic: most prompts short, a few very long ones
    values = [200] * 90 + [300] * 5 + [8000] * 5
    fit = optimal_boundaries(values, 2)
    assert fit.boundaries == (300, 8000)
    assert fit.waste == pytest.approx(90 * 100 / 100)


@pytest.mark.parametrize("bad,match", [([], "no values"), ([-1, 5], "values must be >= 0")])
def test_bad_input_is_named(bad, match):
    with pytest.raises(FitError, match=match):
        pareto_curve(bad, max_buckets=3)


def test_bad_counts_and_granularity():
    with pytest.raises(FitError, match="number of buckets"):
        pareto_curve([1, 2], max_buckets=0)
    with pytest.raises(FitError, match="granularity"):
        pareto_curve([1, 2], max_buckets=2, granularity=0)
