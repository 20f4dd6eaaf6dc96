"""Values typed on the command line (--env, --slo, --goodput, --where, --metric-percentiles, --bs-list):
any text either parses to what it says or fails with the command's own error type, naming the text."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from tuner.buckets.calc import CalcInputError, parse_bs_list
from tuner.commands import UsageError, parse_env_pairs, parse_key_values
from tuner.commands.bench import parse_percentiles
from tuner.vocabulary.errors import UserError

TOKENS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20) | st.sampled_from(
    ["p99_ttft_ms=500", "ttft:200", "=5", "a=", "a==1", "a=nan", "a=inf", "a=-1", "a=1e999", "x:1:2", "", " ",
     "VLLM_A=1=2", "n=0x10", "n=1_000", "n=\u0661", "p99_ttft_ms=2s", "p99_ttft_ms=.5m", "p99_ttft_ms=3h",
     "p99_ttft_ms=800ms", "ttft=2s", "p99_ttft_ms=1e999ms"])


@given(st.lists(TOKENS, max_size=5))
def test_env_pairs_parse_or_fail_with_usage_error(pairs):
    try:
        env = parse_env_pairs(pairs)
    except UsageError as exc:
        assert "--env expects NAME=VALUE" in str(exc)
        return
    for pair in pairs:  # every pair kept: the name before the first '=', the rest as given
        name, _, value = pair.partition("=")
        assert name in env
    assert all(isinstance(v, str) for v in env.values())


@given(st.lists(TOKENS, max_size=4), st.sampled_from([("--slo", "="), ("--goodput", ":"), ("--where", "=")]))
def test_limits_parse_to_finite_non_negative_numbers_or_fail_with_usage_error(pairs, flag_sep):
    flag, sep = flag_sep
    try:
        limits = parse_key_values(pairs, flag, sep=sep)
    except UsageError as exc:
        assert str(exc).startswith(flag)
        return
    assert all(math.isfinite(v) and v >= 0 for v in limits.values())
    assert all(name for name in limits)


@given(TOKENS | st.lists(st.floats(allow_nan=True) | st.integers(), max_size=4).map(lambda xs: ",".join(map(str, xs))))
def test_percentiles_parse_into_range_or_fail_with_usage_error(text):
    try:
        values = parse_percentiles(text)
    except UsageError as exc:
        assert "--metric-percentiles" in str(exc)
        return
    assert values and all(0 < v <= 100 for v in values)


@given(TOKENS | st.lists(st.integers(-5, 10**6), max_size=4).map(lambda xs: ",".join(map(str, xs))))
def test_bs_list_parses_or_fails_with_calc_error(text):
    try:
        parse_bs_list(text)
    except CalcInputError as exc:
        assert "--bs-list" in str(exc)


def test_usage_error_is_a_user_error():
    assert issubclass(UsageError, UserError) and UsageError("x").exit_code == 2


def test_a_millisecond_limit_may_carry_its_unit():
    assert parse_key_values(["p99_ttft_ms=2s first_p99_ttft_ms=800ms p99_e2el_ms=1.5m p99_tpot_ms=80"], "--slo") == {
        "p99_ttft_ms": 2000.0, "first_p99_ttft_ms": 800.0, "p99_e2el_ms": 90_000.0, "p99_tpot_ms": 80.0}
    for bad in ("p99_ttft_ms=2h", "cost=2s"):  # an hour is no latency limit; only _ms names take units
        try:
            parse_key_values([bad], "--slo")
        except UsageError as exc:
            assert bad in str(exc)
        else:
            raise AssertionError(bad)
