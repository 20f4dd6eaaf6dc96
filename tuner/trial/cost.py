"""What serving costs in money: the accelerator price a user states, and the arithmetic on it.

    CostRate        `--cost-per-hour 1.25` (per card, the default unit), `1.25/card` or `10/node` (a node's
                    price shared by its cards: 8 on a Gaudi node unless --cards-per-node says otherwise)
    cards           the cards one server holds: its tensor-parallel size (x pipeline-parallel size)
    per_mtok        dollars per million output tokens at a throughput: the server's hourly price over the
                    tokens it serves in an hour
    best_in_slo     the highest-throughput point of a load sweep that met the SLO (tune --load-sweep)
    payback         hours of serving that repay the study's accelerator-hours and each restart's warm-up,
                    against a baseline configuration
    accelerator_hours  what a trial held its cards for (boot, warm-up, load test), in the server's own time

Pure: numbers in, numbers out; the report, export and the study's `cost_per_mtok` constraint all call it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..vocabulary import display
from ..vocabulary.cost import accelerator_hours, device_seconds  # noqa: F401 (the report reads them here)
from ..vocabulary.cost import cards as trial_cards
from ..vocabulary.cost import server_cards as cards  # noqa: F401 (cards(argv, server))
from ..vocabulary.record import TrialRecord

METRIC = "cost_per_mtok"  # the figure as a metric: `--slo cost_per_mtok=0.40` is a cost ceiling
CARDS_PER_NODE = 8  # a Gaudi 2 or Gaudi 3 node holds eight OAM cards
_RATE = re.compile(r"^\s*\$?\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?:/\s*(card|node))?\s*$")


class CostError(ValueError):
    """A price that cannot be read; the message names the value."""


@dataclass(frozen=True)
class CostRate:
    per_card_hour: float  # dollars per card-hour (a node's price divided by its cards)
    given: str  # as the user wrote it, for the lines that show it: "10/node (8 cards)"

    def server_hour(self, n_cards: int) -> float:
        return self.per_card_hour * n_cards

    def to_json(self) -> dict[str, Any]:
        return {"per_card_hour": self.per_card_hour, "given": self.given}

    @classmethod
    def from_json(cls, data: dict | None) -> CostRate | None:
        if not data or data.get("per_card_hour") is None:
            return None
        return cls(float(data["per_card_hour"]), str(data.get("given") or data["per_card_hour"]))


def parse_rate(text: str, cards_per_node: int = CARDS_PER_NODE) -> CostRate:
    """`1.25`, `1.25/card`, `$10/node` -> a CostRate; anything else is a CostError naming the value."""
    found = _RATE.match(str(text))
    if not found:
        raise CostError(f"--cost-per-hour {text!r}: expected dollars per hour per card or per node, e.g. "
                        "1.25 (per card), 1.25/card or 10/node")
    price, unit = float(found.group(1)), found.group(2) or "card"
    if not (math.isfinite(price) and price > 0):
        raise CostError(f"--cost-per-hour {text!r}: the price must be a number > 0")
    if unit == "card":
        return CostRate(price, f"${price:g}/card-hour")
    if cards_per_node < 1:
        raise CostError(f"--cards-per-node {cards_per_node}: a node holds at least one card")
    per_card = price / cards_per_node
    return CostRate(per_card, f"${per_card:g}/card-hour (${price:g}/node-hour over {cards_per_node} cards)")


def per_mtok(rate: CostRate, n_cards: int, output_tok_s: float | None) -> float | None:
    """Dollars per million output tokens: the server's price for an hour over the tokens of that hour."""
    if output_tok_s is None or not output_tok_s > 0:
        return None
    return rate.server_hour(n_cards) / (output_tok_s * 3600.0) * 1e6


def best_in_slo(observed: dict[str, Any]) -> tuple[str, float] | None:
    """(point label, output tok/s) of the load sweep's highest-throughput point that met the SLO; None
    without a sweep or when no point met it."""
    best = None
    for p in observed.get("load_sweep") or []:
        thr = (p.get("metrics") or {}).get("output_throughput")
        if p.get("meets_slo") and thr is not None and (best is None or thr > best[1]):
            best = (str(p.get("point")), float(thr))
    return best


@dataclass(frozen=True)
class TrialCost:
    """A trial's cost per million output tokens at its measured load, and at its best load within the SLO."""

    cards: int
    server_hour: float  # dollars per hour of the server (all its cards)
    measured: float | None  # $/Mtok at the load the trial measured
    in_slo: float | None = None  # $/Mtok at the sweep's highest load within the SLO
    in_slo_point: str | None = None  # that point, e.g. "rate=8"


def trial_cost(rate: CostRate, rec: TrialRecord) -> TrialCost:
    n = trial_cards(rec)
    thr = rec.metrics.get("output_throughput") if rec.ok else None
    best = best_in_slo(rec.observed) if rec.ok else None
    return TrialCost(n, rate.server_hour(n), per_mtok(rate, n, thr),
                     per_mtok(rate, n, best[1]) if best else None, best[0] if best else None)


def cost_lines(rate: CostRate, rec: TrialRecord) -> list[str]:
    """The lines that state a trial's cost (export's header): per million output tokens at the measured
    load and at the sweep's highest load within the SLO, with the price they come from."""
    c = trial_cost(rate, rec)
    if c.measured is None:
        return [f"cost: no measured throughput to price ({rate.given})"]
    thr = rec.metrics.get("output_throughput")
    out = [f"cost: {money(c.measured)} per million output tokens at the measured load ({thr:,.0f} tok/s; "
           f"{c.cards} card{'s' if c.cards != 1 else ''} x {rate.given} = {money(c.server_hour)}/h)"]
    if c.in_slo is not None:
        out.append(f"cost: {money(c.in_slo)} per million output tokens at the highest load within the SLO "
                   f"({c.in_slo_point})")
    return out


@dataclass(frozen=True)
class Payback:
    """Hours of serving the pick at its measured throughput that repay what it took to find and start it,
    against serving the same tokens on the baseline."""

    study_cost: float  # dollars: the study's accelerator-hours at the rate
    saving_per_hour: float  # dollars saved per hour of serving (<= 0: the pick never pays back)
    restart_extra: float  # dollars each restart costs more than the baseline's (< 0: it saves)

    @property
    def hours(self) -> float | None:
        """Hours of serving that repay the study; None when the pick saves nothing per token."""
        return self.study_cost / self.saving_per_hour if self.saving_per_hour > 0 else None

    @property
    def hours_per_restart(self) -> float | None:
        """Hours of serving that repay one restart's longer warm-up (negative: a restart saves that much)."""
        return self.restart_extra / self.saving_per_hour if self.saving_per_hour > 0 else None

    def sentence(self, restarts_word: str = "each restart") -> str:
        if self.hours is None:
            return (f"no payback: the pick costs no less per token than the baseline; the study cost "
                    f"${self.study_cost:,.2f}")
        per = self.hours_per_restart or 0.0
        restart = (f"{restarts_word} adds {per:,.2f} h (its warm-up costs ${self.restart_extra:,.2f} more)"
                   if per > 0 else f"{restarts_word} saves {-per:,.2f} h (its warm-up costs "
                   f"${-self.restart_extra:,.2f} less)")
        return (f"{self.hours:,.1f} h of serving repay the study (${self.study_cost:,.2f} at "
                f"${self.saving_per_hour:,.2f} saved per hour); {restart}")


def payback(rate: CostRate, study_accelerator_hours: float, pick_cards: int, pick_tok_s: float,
            pick_warmup_s: float, base_cards: int, base_tok_s: float, base_warmup_s: float) -> Payback | None:
    """The pick against the baseline: serving one hour of the pick's tokens (at its measured throughput)
    costs the pick its server-hour and the baseline its price per token for as many tokens; a restart
    holds the cards for the warm-up, paid at each one's server-hour."""
    pick, base = per_mtok(rate, pick_cards, pick_tok_s), per_mtok(rate, base_cards, base_tok_s)
    if pick is None or base is None:
        return None
    mtok_per_hour = pick_tok_s * 3600.0 / 1e6
    saving = (base - pick) * mtok_per_hour
    restart = (rate.server_hour(pick_cards) * pick_warmup_s - rate.server_hour(base_cards) * base_warmup_s) / 3600.0
    return Payback(study_accelerator_hours * rate.per_card_hour, saving, restart)


# ------------------------------------------------------------------------------------ accelerator time

def money(x: float | None) -> str:
    """$1.23 (whole dollars from $1,000, four decimals below $0.10); "-" for no figure."""
    return display.metric(METRIC, x)
