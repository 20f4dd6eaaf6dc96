"""The cost arithmetic (tuner/trial/cost.py) on figures a person can check by hand."""

from __future__ import annotations

import pytest

from tuner.trial.cost import (
    CostError,
    CostRate,
    best_in_slo,
    cards,
    parse_rate,
    payback,
    per_mtok,
)


@pytest.mark.parametrize("text, per_card", [("1.25", 1.25), ("1.25/card", 1.25), ("$10/node", 1.25),
                                            (" 2 / card ", 2.0), ("1e1/node", 1.25)])
def test_a_price_is_per_card_or_shared_by_a_nodes_cards(text, per_card):
    assert parse_rate(text).per_card_hour == pytest.approx(per_card)


def test_a_node_price_is_shared_by_the_cards_the_user_names():
    assert parse_rate("12/node", cards_per_node=4).per_card_hour == pytest.approx(3.0)


@pytest.mark.parametrize("text", ["", "abc", "10/gpu", "-1", "0", "1,5", "10/node/card"])
def test_a_price_that_cannot_be_read_is_refused_naming_it(text):
    with pytest.raises(CostError, match="--cost-per-hour") as exc:
        parse_rate(text)
    assert repr(text) in str(exc.value)


def test_cost_per_million_tokens_is_the_server_hour_over_its_tokens():
    rate = CostRate(2.0, "$2/card-hour")
    # 2 cards at $2 = $4/h; 2,000 tok/s = 7.2 M tokens an hour -> $0.5556 per million
    assert per_mtok(rate, 2, 2000.0) == pytest.approx(4 / 7.2)
    assert per_mtok(rate, 1, 0.0) is None and per_mtok(rate, 1, None) is None


@pytest.mark.parametrize("argv, server, expected", [
    (["vllm", "serve", "m"], {}, 1),
    (["vllm", "serve", "m", "--tensor-parallel-size", "4"], {}, 4),
    (["vllm", "serve", "m", "--tensor-parallel-size=2", "--pipeline-parallel-size", "2"], {}, 4),
    (["vllm", "serve", "m"], {"tensor_parallel_size": 8}, 8),
])
def test_a_server_holds_tp_times_pp_cards(argv, server, expected):
    assert cards(argv, server) == expected


def test_the_best_load_within_the_slo_is_the_fastest_point_that_met_it():
    observed = {"load_sweep": [
        {"point": "rate=4", "meets_slo": True, "metrics": {"output_throughput": 1500.0}},
        {"point": "rate=8", "meets_slo": True, "metrics": {"output_throughput": 2400.0}},
        {"point": "rate=16", "meets_slo": False, "metrics": {"output_throughput": 3000.0}},
        {"point": "rate=32", "status": "skipped"},
    ]}
    assert best_in_slo(observed) == ("rate=8", 2400.0)
    assert best_in_slo({"load_sweep": observed["load_sweep"][2:]}) is None
    assert best_in_slo({}) is None


def test_payback_repays_the_study_and_each_restart_from_the_hourly_saving():
    rate = CostRate(2.0, "$2/card-hour")
    # baseline: 1 card, 500 tok/s -> $2 / 1.8 Mtok = $1.111/Mtok; pick: 2 cards, 2,000 tok/s -> $0.556/Mtok.
    # An hour of the pick's 7.2 Mtok costs $4 on it and $8 on the baseline: $4 saved per hour.
    # The study: 5 card-hours = $10 -> 2.5 h. A restart: the pick warms 450 s on $4/h ($0.50), the baseline
    # 90 s on $2/h ($0.05): $0.45 more, repaid in 0.1125 h.
    p = payback(rate, 5.0, 2, 2000.0, 450.0, 1, 500.0, 90.0)
    assert p.study_cost == pytest.approx(10.0)
    assert p.saving_per_hour == pytest.approx(4.0)
    assert p.hours == pytest.approx(2.5)
    assert p.hours_per_restart == pytest.approx(0.1125)
    assert "2.5 h of serving repay the study" in p.sentence()


def test_a_pick_that_costs_more_per_token_never_pays_back():
    p = payback(CostRate(2.0, "x"), 5.0, 4, 1000.0, 100.0, 1, 500.0, 100.0)
    assert p.saving_per_hour < 0 and p.hours is None
    assert p.sentence().startswith("no payback")
