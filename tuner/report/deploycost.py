"""What deploying the study's answer costs and needs: dollars per million output tokens of every trial, the
front and the picks, the payback of the study against the baseline (with --cost-per-hour, or the price
the study was tuned with), and whether a startup probe the user states would kill the pick during its
warm-up (report --startup-probe-seconds / --manifest). The arithmetic is tuner/trial/cost.py's and
tuner/results/startlimits.py's; this module only shows it, in report.html and the terminal."""

from __future__ import annotations

from dataclasses import dataclass

from optuna.trial import FrozenTrial

from ..results.export import PICKS
from ..results.startlimits import ProbeVerdict, primary, trial_limits
from ..trial.cost import CostRate, Payback, accelerator_hours, money, payback, trial_cost
from .data import ReportData
from .facts import safe_pick
from .tables import esc, table
from .terminal import console_for_output, numeric_table


@dataclass(frozen=True)
class DeployCheck:
    """The report's deployment inputs: a price (None: the study's own, if any) and a stated probe."""

    rate: CostRate | None = None
    probe_s: float | None = None  # what the user's startup probe allows (None: none stated)
    probe_from: str = ""  # "--startup-probe-seconds", or the manifest and container it was read from

    def price(self, d: ReportData) -> CostRate | None:
        return self.rate or CostRate.from_json(d.study.user_attrs.get("cost"))


def probe_verdict(d: ReportData, check: DeployCheck | None) -> ProbeVerdict | None:
    """The stated probe against the balanced pick's start (the cold one: see startlimits.primary)."""
    if check is None or check.probe_s is None or d.pick is None:
        return None
    lim = primary(trial_limits(d.study, d.pick))
    return None if lim is None else ProbeVerdict(check.probe_s, lim)


def probe_warning(d: ReportData, check: DeployCheck | None) -> str | None:
    """One line: 'warning: ...' when the stated probe would (or may) kill the pick, else what it covers."""
    v = probe_verdict(d, check)
    if v is None:
        return None
    text = f"{check.probe_from}: {v.sentence(d.pick.number)}"
    return f"warning: {text}" if v.kills else text


def _base(d: ReportData) -> tuple[str, FrozenTrial] | None:
    """What the pick is compared with: the baseline (tune --baseline), else the release defaults."""
    for label, t in (("baseline", d.baseline), ("release defaults", d.defaults)):
        if t is not None and d.record(t).ok and t.values:
            return label, t
    return None


def study_payback(d: ReportData, rate: CostRate) -> tuple[str, FrozenTrial, Payback] | None:
    """(label, baseline trial, payback) of the balanced pick; None without a pick or a measured baseline."""
    base = _base(d)
    if d.pick is None or base is None or base[1].number == d.pick.number:
        return None
    hours = sum(accelerator_hours(d.record(t), d.backend) for t in d.trials)
    p, b = trial_cost(rate, d.record(d.pick)), trial_cost(rate, d.record(base[1]))
    pick_rec, base_rec = d.record(d.pick), d.record(base[1])
    paid = payback(rate, hours, p.cards, pick_rec.metrics.get("output_throughput"),
                   float(pick_rec.observed.get("warmup_s") or 0.0), b.cards,
                   base_rec.metrics.get("output_throughput"), float(base_rec.observed.get("warmup_s") or 0.0))
    return None if paid is None else (base[0], base[1], paid)


def _picks(d: ReportData) -> list[tuple[str, FrozenTrial]]:
    out = []
    for pick in PICKS:
        t = d.pick if pick == "balanced" else safe_pick(d.study, pick)
        if t is not None:
            out.append((pick, t))
    return out


def _cost_cells(d: ReportData, rate: CostRate, t: FrozenTrial) -> list:
    c = trial_cost(rate, d.record(t))
    return [(money(c.measured), c.measured),
            (f"{money(c.in_slo)} ({c.in_slo_point})" if c.in_slo is not None else "-", c.in_slo)]


def section(d: ReportData, check: DeployCheck | None = None) -> str:
    """The report's 'deploy' section: the probe check, then the costs (each only when it applies)."""
    rate = check.price(d) if check else CostRate.from_json(d.study.user_attrs.get("cost"))
    out = ["<section id='deploy'><h2>Deploying it: start-up and cost</h2>"]
    warning = probe_warning(d, check)
    if warning:
        out.append(f"<p class='{'warn' if warning.startswith('warning') else 'note'}'>{esc(warning)}</p>")
    if d.pick is not None:
        lim = primary(trial_limits(d.study, d.pick))
        if lim is not None:
            out.append(f"<p>Start-up limit of the pick (trial {d.pick.number}), {esc(lim.evidence())}: a startupProbe "
                       f"of failureThreshold {lim.failure_threshold} x periodSeconds {lim.period_s} covers it "
                       "(`bucket-tuner export` writes it into the env file, a Kubernetes Deployment and a Slurm "
                       "job).</p>")
    if rate is None:
        out.append("<p class='none'>No price: give --cost-per-hour (per card, or e.g. 10/node) for the cost "
                   "of every trial per million output tokens and the study's payback.</p>")
        return "".join(out) + "</section>"
    out.append(f"<p>At {esc(rate.given)}; a server's cards are its tensor-parallel size. Dollars per million output "
               "tokens at the load each trial measured, and at the highest load within the SLO where a load sweep "
               "found one.</p>")
    paid = study_payback(d, rate)
    if paid is not None:
        label, base, p = paid
        out.append(f"<p>Payback against the {esc(label)} (trial {base.number}): {esc(p.sentence())}.</p>")
    headers = ["", "trial", "$/M output tokens", "$/M at the best load within the SLO", "settings"]
    rows = [(name, t.number, *_cost_cells(d, rate, t), _settings(t)) for name, t in _picks(d)]
    out.append("<h3>The picks</h3>" + table(headers, rows))
    rows = [(t.number, *_cost_cells(d, rate, t), _settings(t)) for t in d.front]
    out.append("<h3>The front</h3>" + table(headers[1:], rows, cls="sortable"))
    rows = [(t.number, *_cost_cells(d, rate, t), _settings(t)) for t in d.measured()]
    out.append("<h3>Every measured trial</h3>" + table(headers[1:], rows, cls="sortable", table_id="cost-table"))
    return "".join(out) + "</section>"


def _settings(t: FrozenTrial) -> str:
    from .facts import settings_text

    return settings_text(t)


def print_costs(study, console=None, check: DeployCheck | None = None) -> None:
    """The terminal's lines after the front's table: the probe warning, the front's and the picks' cost per
    million output tokens, and the payback (nothing without a price or a stated probe)."""
    from rich.markup import escape

    from .data import gather

    console = console_for_output(console)
    d = gather(study)
    warning = probe_warning(d, check)
    if warning:
        console.print(f"[yellow]{escape(warning)}[/]" if warning.startswith("warning") else escape(warning),
                      soft_wrap=True)
    rate = check.price(d) if check else CostRate.from_json(d.study.user_attrs.get("cost"))
    if rate is None or not d.front:
        return
    picks: dict[int, list[str]] = {}
    for name, t in _picks(d):
        picks.setdefault(t.number, []).append(name)
    rows = numeric_table(f"Cost of the front at {rate.given}", ["#", "$/Mtok", "in SLO"], console, settings=False)
    rows.add_column("pick")
    for t in d.front:
        c = trial_cost(rate, d.record(t))
        rows.add_row(str(t.number), money(c.measured), money(c.in_slo), ", ".join(picks.get(t.number, [])))
    console.print(rows)
    console.print("($/Mtok: dollars per million output tokens at the measured load; in SLO: at the load sweep's "
                  "highest load within the SLO)", markup=False)
    paid = study_payback(d, rate)
    if paid is not None:
        label, base, p = paid
        console.print(f"payback against the {label} (trial {base.number}): {p.sentence()}", soft_wrap=True,
                      markup=False)
