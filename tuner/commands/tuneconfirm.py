"""`tune --confirm`, `--confirm-budget`, `--confirm-confidence`: the flags and the study's ConfirmOptions
(what the confirmation does: tuner/study/confirm.py and confirmrun.py)."""

from __future__ import annotations

import re

from . import UsageError

DEFAULT_BUDGET = "15%"


def add_confirm_flags(g) -> None:
    g.add_argument("--confirm", action="store_true",
                   help="after the search, re-measure what could change the recommendation (the balanced pick, "
                        "the highest throughput under each --slo, their nearest rivals, SLO-borderline "
                        "configurations), with fresh prompts, another load run on the same boot when the warm-up "
                        "is not in doubt, until every pick stands in --confirm-confidence of redraws within the "
                        "measured noise or --confirm-budget is spent; the front, report and export use the "
                        "confirmed estimates (the mean of each configuration's measurements). On a study that "
                        "already holds --n-trials, only the confirmation runs. Re-measurements do not count "
                        "toward --n-trials")
    g.add_argument("--confirm-budget", default=DEFAULT_BUDGET, metavar="SHARE|HOURS",
                   help="what --confirm may spend: a share of the accelerator-hours the search spent (default "
                        "15%%), or accelerator-hours (e.g. 2.5h, 90m); earlier confirmations of the study count "
                        "against it")
    g.add_argument("--confirm-confidence", type=float, default=0.9, metavar="P",
                   help="the share of redraws within the noise in which every pick must stand (default 0.9)")


def confirm_options(args):
    """The study's ConfirmOptions for `tune --confirm`, or None."""
    from ..study.confirm import ConfirmOptions

    if not getattr(args, "confirm", False):
        return None
    confidence = float(getattr(args, "confirm_confidence", 0.9))
    if not 0.5 <= confidence < 1.0:
        raise UsageError(f"--confirm-confidence must be at least 0.5 and below 1, got {confidence:g}")
    share, hours = parse_budget(str(getattr(args, "confirm_budget", DEFAULT_BUDGET)))
    return ConfirmOptions(confidence=confidence, budget_share=share if share is not None else 0.15,
                          budget_hours=hours)


def parse_budget(text: str) -> tuple[float | None, float | None]:
    """(share, None) for '15%', (None, hours) for '2.5h' or '90m'; a clear error for anything else."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(%|h|m)\s*", text)
    if m is None:
        raise UsageError(f"--confirm-budget {text!r}: give a share of the search's accelerator-hours (15%) "
                         "or accelerator-hours (2.5h, 90m)")
    value, unit = float(m.group(1)), m.group(2)
    if unit == "%":
        return value / 100.0, None
    return None, value if unit == "h" else value / 60.0
