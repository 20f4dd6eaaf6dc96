"""The price flags of `tune`, `report` and `export` (--cost-per-hour, --cards-per-node), read once here."""

from __future__ import annotations

from . import UsageError, parse_key_values

COST_HELP = ("accelerator price in dollars per hour: per card (1.25 or 1.25/card) or per node (10/node, shared by "
             "--cards-per-node cards); a server's cards are its tensor-parallel size. Gives $ per million output "
             "tokens (cost_per_mtok) for every trial and the payback against the baseline")


def add_cost_flags(p, study_default: bool = True) -> None:
    g = p.add_argument_group("cost")
    g.add_argument("--cost-per-hour", metavar="PRICE", help=COST_HELP + (
        " (default: the price the study was tuned with, if any)" if study_default else ""))
    g.add_argument("--cards-per-node", type=int, default=None, metavar="N",
                   help="cards a node's price covers, with --cost-per-hour .../node (default 8: a Gaudi node)")
    if not study_default:  # tune: cost can be what the study optimises, not only a limit (--slo cost_per_mtok=)
        g.add_argument("--cost-objective", action="store_true",
                       help="optimise cost too: $ per million output tokens (from --cost-per-hour) becomes a fourth "
                            "objective, minimised; it differs from throughput where servers hold different numbers "
                            "of cards (tensor parallelism in the space)")


def cost_rate(args, study=None):
    """The CostRate the flags give; without --cost-per-hour, the one `study` was tuned with (or None)."""
    from ..trial.cost import CARDS_PER_NODE, CostError, CostRate, parse_rate

    text = getattr(args, "cost_per_hour", None)
    per_node = getattr(args, "cards_per_node", None)
    if text is None:
        if per_node is not None:
            raise UsageError("--cards-per-node needs --cost-per-hour PRICE/node")
        return CostRate.from_json(study.user_attrs.get("cost")) if study is not None else None
    try:
        return parse_rate(text, CARDS_PER_NODE if per_node is None else per_node)
    except CostError as exc:
        raise UsageError(str(exc)) from None


def tune_cost(args):
    """tune --cost-per-hour: every measured load gets its cost_per_mtok; `--slo cost_per_mtok=X` needs the price."""
    from ..trial.cost import METRIC

    rate = cost_rate(args)
    if rate is None and METRIC in parse_key_values(getattr(args, "slo", None), "--slo"):
        raise UsageError(f"--slo {METRIC}=...: give the price with --cost-per-hour (per card, or e.g. 10/node)")
    if rate is None and getattr(args, "cost_objective", False):
        raise UsageError("--cost-objective: give the price with --cost-per-hour (per card, or e.g. 10/node)")
    return rate
